"""Which way the analyses compute on a device: choices of speed, not of value, kept apart from the code that keys
cached analyses (geofact.code_hash hashes geofact/analysis and the model, task and precision modules), so that
setting them from a GPU lease's benchmark (bench/bench_decide.py) does not compute every cached analysis again.

Every path gives float32's answer to what an analysis asks of a prediction (whether it is its target), under the
recheck's margin (geofact.analysis.rechecked): through TF32 matmuls on FAST_DEVICES, the rows near a tie that
decides them again in float32; and at d <= DECIDE_MAX_D on DECIDE_DEVICES with the unembedding and the decision in
one Triton kernel that never writes the logits (geofact.analysis.fused_decide), where geofact's kernels are
wanted (geofact.training.fused_ce.wanted).
"""

FAST_DEVICES = ("cuda",)  # device types whose decisions go through TF32, rechecked
# The largest d whose decisions go through the kernel: where its arithmetic costs less than the logits' three passes
# through memory at the rate geofact's kernels reached on the H200 lease (31 TFLOP/s for the fused output layer's
# tiles, geofact.training.step); bench/bench_decide.py measures both on the next lease
DECIDE_MAX_D = 128
DECIDE_DEVICES = ("cuda", "meta")  # where the kernel may run: the GPU it is written for, the fake device that counts it
