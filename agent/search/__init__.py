"""Memory search (see index.py).

numpy (here only for the vectors) multiplies with OpenBLAS, whose threads spin while
they wait. The search's scan of 100,000 vectors with them (two, one a core) next to the
embedding model's threads, on a busy two-core machine: hybrid query median 88-100 ms,
CPU 80-92 ms; on one thread: 65 ms, CPU 47-50 ms (scripts/bench_search.py's vault).
Read when numpy loads (only search loads it): set before; a setting of the user's wins.
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
