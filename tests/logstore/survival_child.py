"""A stand-in worker for the survival test: runs a task that prints a numbered, timestamped
line every ~20 ms and ships its stdout with a LogShipper until it is SIGKILLed.

usage: survival_child.py local ROOT JOB | survival_child.py gcs URL BUCKET JOB
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from iris.logstore.gcs import GcsSink
from iris.logstore.shipper import LogShipper
from iris.logstore.sinks import LocalDirSink

TASK = """
import itertools, time
for i in itertools.count():
    print(f"{i} {time.time():.6f}", flush=True)
    time.sleep(0.02)
"""


def main(argv: list[str]) -> None:
    if argv[0] == "local":
        sink, job = LocalDirSink(argv[1]), argv[2]
    else:
        client = storage.Client(project="iris-test", credentials=AnonymousCredentials(),
                                client_options={"api_endpoint": argv[1]})
        sink, job = GcsSink(argv[2], "iris", client=client), argv[3]
    shipper = LogShipper(sink, job, 0, 0)
    task = subprocess.Popen([sys.executable, "-c", TASK], stdout=subprocess.PIPE)
    fd = task.stdout.fileno()

    def pump() -> None:
        while data := os.read(fd, 65536):
            shipper.write("stdout", data)

    reader = threading.Thread(target=pump)
    reader.start()
    reader.join()  # runs until the test kills the whole process group


if __name__ == "__main__":
    main(sys.argv[1:])
