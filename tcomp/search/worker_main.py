"""The entry point of a LocalRunner worker: `python -m tcomp.search.worker_main FD`,
FD a socket to the runner (workers.py has the protocol). A module of tcomp's
own, so that starting a worker never imports the user's script."""
import sys

from tcomp.search.workers import start_worker

if __name__ == "__main__":
    start_worker(int(sys.argv[1]))
