"""bench-frag's parts: the openb trace and its workloads (trace), the fragmentation measure
(measure), the simulator's reference policies (references), our core behind the same harness
(ours), the replay loop (replay) and the report (report). bench_frag.py runs them."""
