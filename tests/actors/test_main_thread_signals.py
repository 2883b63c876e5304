"""A caller's main thread blocked on a call still gets Ctrl-C (iris/actors/wakers.py): a
SIGINT the kernel hands to another of its threads runs its handler within a slice."""

import os
import signal
import subprocess
import sys

from tests.conftest import main_thread_asleep

CALLER = """
import os, threading
import iris
from iris.actors import Node, NodeConfig

@iris.actor
class Slow:
    def forever(self):
        threading.Event().wait()

node = Node(NodeConfig()).start()
node.host("slow", Slow)
other = threading.Thread(target=threading.Event().wait, daemon=True)
other.start()
print(other.native_id, flush=True)
try:
    node.call(node.address, "slow", "forever").result()
except KeyboardInterrupt:
    print("interrupted", flush=True)
    os._exit(3)
"""


def test_ctrl_c_taken_by_another_thread_interrupts_a_call_waiting_on_the_main_thread(
        wait_until):
    proc = subprocess.Popen([sys.executable, "-c", CALLER], stdout=subprocess.PIPE, text=True)
    try:
        other = int(proc.stdout.readline())
        wait_until(lambda: main_thread_asleep(proc.pid), what="the call waiting")
        os.kill(other, signal.SIGINT)  # kill(2) of a thread's id: that thread takes it
        assert proc.wait(60) == 3
        assert proc.stdout.read().strip() == "interrupted"
    finally:
        proc.kill()
        proc.wait()
