#!/usr/bin/env bash
# One command of a GPU lease (book/paper-scale.md, "A GPU lease"), run on the node from the tree's root:
#
#   GEOFACT_GIT_COMMIT=<home commit> bash tools/lease.sh LIMIT_SECONDS [--calibrate] [PAGE ...] [--grid-d D ...]
#
# In order, each step logged under $OUT: the CUDA tests (once per machine; a failure stops here, before
# any time goes on scale, unless the tests pass again without the fused output layer, GEOFACT_FUSED_CE=0, which
# every later command on the machine then keeps); the records of earlier leases (results/<profile>/records/*.tar.gz) unpacked into the run cache;
# with --calibrate, the benchmark's calibration (bench/calibration/<device>-<card>.json, copied to $OUT); the
# pages' compute side (`geofact compute`, all training pages unless PAGEs are named; with --grid-d /
# --grid-R, the mechanism pages on those cells of the capacity grid) under what is left of LIMIT_SECONDS
# less a margin for packing (past which compute is stopped); and the run cache's records packed into $OUT.
# PROFILE (default paper) and DEVICE (default cuda) change the target; the lease rehearsal
# (tests/pipeline/test_pipeline.py) runs it at smoke on a CPU. Exit status: compute's (3: unfinished,
# the same command again goes on), or 1 when a step before it failed.
set -u -o pipefail
start=$SECONDS
limit=${1:?usage: tools/lease.sh LIMIT_SECONDS [--calibrate] [PAGE ...]}
shift
calibrate=0
if [ "${1:-}" = "--calibrate" ]; then calibrate=1; shift; fi
profile=${PROFILE:-paper}
device=${DEVICE:-cuda}
: "${GEOFACT_GIT_COMMIT:?set GEOFACT_GIT_COMMIT to the home commit the tree was sent at (git rev-parse HEAD)}"
: "${OUT:?set OUT to the folder whose files come back}"
head=$(git rev-parse HEAD 2>/dev/null)
if [ -n "$head" ] && [ "$head" != "$GEOFACT_GIT_COMMIT" ]; then  # a mistyped commit would label every record
    # a warm machine keeps the .git of its first command while the tree is sent anew: when the tree no longer
    # matches that HEAD, the .git is older than the tree and cannot say which commit the tree is
    if git diff --quiet HEAD 2>/dev/null || git cat-file -e "$GEOFACT_GIT_COMMIT^{commit}" 2>/dev/null; then
        echo "GEOFACT_GIT_COMMIT=$GEOFACT_GIT_COMMIT is not this tree's HEAD, $head: give \$(git rev-parse HEAD)" >&2
        exit 1
    fi
    echo "warning: this machine's .git (HEAD $head) is older than the tree sent; GEOFACT_GIT_COMMIT is not checked:" \
        "compare it at home with the commit \`geofact unpack\` names" >&2
fi
export PYTHONPATH=. PYTHONUNBUFFERED=1 GEOFACT_GIT_COMMIT
python=${PYTHON:-python3}
margin=${PACK_MARGIN:-45}

step() { echo "[lease $((SECONDS - start)) s] $*"; }

step "device $device, profile $profile, commit $GEOFACT_GIT_COMMIT"
if [ "$device" = cuda ]; then nvidia-smi -L; fi
$python -c "import torch; print('torch', torch.__version__)"

passed=.geofact/cuda-tests-passed  # once per machine: a later command of the lease spends its time on scale
unfused=.geofact/fused-ce-off  # the fused output layer failed here: every command of this machine goes without it
if [ -e "$unfused" ]; then export GEOFACT_FUSED_CE=0; fi
# The tests run as CUDA_TEST_SHARDS pytest processes at once (GEOFACT_TEST_SHARD, tests/conftest.py), each on its
# share of the cores: their time is mostly the CPU's (Triton compiling each kernel's specialisations, the float64
# references on the CPU, torch's start), 68 s in one process on the H200 of 2026-11-30 against the target of 60 s
# for tests, unpack and pack together (issue 47). --durations: each shard says which tests its time goes on.
shards=${CUDA_TEST_SHARDS:-4}
if ! [[ $shards =~ ^[1-9][0-9]*$ ]]; then echo "CUDA_TEST_SHARDS must be a whole number >= 1, got '$shards'" >&2; exit 1; fi
cuda_tests() {
    local k code status=0 empty=0 pids=()
    trap 'kill "${pids[@]}" 2>/dev/null; exit 143' INT TERM  # a lease stopped here leaves no shard holding the GPU
    for ((k = 0; k < shards; k++)); do
        GEOFACT_TEST_SHARD=$k/$shards $python -m pytest -q -p no:cacheprovider --durations=5 tests/training/test_cuda.py \
            tests/analysis/test_cuda.py >"$OUT/tests-shard$k.log" 2>&1 &
        pids+=($!)
    done
    for k in "${!pids[@]}"; do
        wait "${pids[$k]}"
        code=$?
        if [ $code -eq 5 ]; then empty=$((empty + 1)); elif [ $code -ne 0 ]; then status=$code; fi  # 5: no test there
    done
    trap - INT TERM
    if [ $status -eq 0 ] && [ $empty -eq "$shards" ]; then status=5; fi  # no test ran at all: not a pass
    for ((k = 0; k < shards; k++)); do echo "  shard $k/$shards: $(tail -n 1 "$OUT/tests-shard$k.log")"; done
    for ((k = 0; k < shards; k++)); do echo "== shard $k/$shards"; cat "$OUT/tests-shard$k.log"; done >"$OUT/tests.log"
    rm -f "$OUT"/tests-shard*.log
    return $status
}
if [ -e "$passed" ]; then step "CUDA tests: passed on this machine earlier${GEOFACT_FUSED_CE:+ (GEOFACT_FUSED_CE=$GEOFACT_FUSED_CE)}"; else
    step "CUDA tests"
    tests_start=$SECONDS
    cuda_tests
    status=$?
    step "CUDA tests: $((SECONDS - tests_start)) s in $shards processes"
    if [ $status -ne 0 ] && [ "${GEOFACT_FUSED_CE:-1}" = 1 ]; then
        # the Triton kernels of the output layer (geofact.training.fused_ce) are new to every GPU until one has run
        # them: without them the step is the torch ops' that earlier leases ran, so the lease is not lost
        cp "$OUT/tests.log" "$OUT/tests-fused.log"
        step "the CUDA tests failed with the fused output layer: again with GEOFACT_FUSED_CE=0 (tests-fused.log kept)"
        export GEOFACT_FUSED_CE=0
        cuda_tests
        status=$?
        if [ $status -eq 0 ]; then mkdir -p .geofact && touch "$unfused"; fi
    fi
    if [ $status -ne 0 ]; then step "the CUDA tests failed (status $status): nothing run at scale"; exit 1; fi
    mkdir -p .geofact && touch "$passed"
fi

# once per machine: a later command of this lease keeps the records it trained again (a run of its grid
# cells whose weights an earlier lease took with it); the newest archive holds every earlier record
mkdir -p .geofact/unpacked
for archive in results/"$profile"/records/*.tar.gz results/"$profile"/records/*.tar.gz.part1of*; do
    [ -e "$archive" ] || continue
    marker=.geofact/unpacked/$(basename "$archive")
    [ -e "$marker" ] && continue
    step "unpack $archive"
    $python -m geofact.pipeline.cli unpack --force "$archive" | tail -1 || exit 1
    touch "$marker"
done

if [ $calibrate -eq 1 ]; then
    step "calibration"
    $python bench/bench_trainer.py --device "$device" --calibrate --json --out "$OUT/bench.json" >"$OUT/bench.log" 2>&1 || exit 1
    tail -1 "$OUT/bench.log"
    for f in bench/calibration/"${device%%:*}".json bench/calibration/"${device%%:*}"-*.json; do  # one file a card
        if [ -e "$f" ]; then cp "$f" "$OUT/"; fi
    done
fi

budget=$((limit - (SECONDS - start) - margin))
if [ $budget -lt 30 ]; then step "only $budget s left for compute: skipped"; compute=3; else
    step "compute, budget $budget s: ${*:-the training pages}"
    # the budget is compute's own soft deadline; past it, with the margin less the packing's 15 s spent too, a
    # hard stop keeps the pack from being cut off by the command's limit (records are written atomically)
    timeout -k 5 $((budget + margin - 15)) \
        $python -m geofact.pipeline.cli compute --profile "$profile" --device "$device" --budget "$budget" "$@" >"$OUT/compute.log" 2>&1
    compute=$?
    if [ $compute -eq 124 ] || [ $compute -eq 137 ]; then step "compute stopped past its budget"; compute=3; fi
    tr '\r' '\n' <"$OUT/compute.log" | grep -v "run-step/s" | tail -12
fi

step "pack"
$python -m geofact.pipeline.cli pack "$OUT/$profile.tar.gz" --profile "$profile" | tail -1 || exit 1
step "done, compute status $compute"
exit $compute
