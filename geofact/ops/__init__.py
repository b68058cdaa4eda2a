"""Operations: what it takes to run the science at the paper's scale, apart from the science and the book.

Planning a lease (`costs`, the cost model; `page_plan`, `geofact plan`), benchmarking the step (`benchmark`, `step_ab`), submitting sweeps to a
cluster (`cluster`), and moving work to and from a GPU node (`compute`, `pack`, `bundle`). These modules may
import the science (`geofact.training`, ...) and the publisher's project files (`geofact.pipeline.project`,
`script`); the publisher imports only those that reach no model, and the science only `cluster`, the executor
its sweeps hand their groups to (tests/test_layout.py).
"""
