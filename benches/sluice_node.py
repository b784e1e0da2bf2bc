"""One `sluice server` process for the single-node benchmarks: free ports, the shipped
defaults (only ports and log.dirs overridden), its log in the work dir, and what /proc says
about it. Imported by benches/many_partitions.py, benches/steady_latency.py and
benches/security_perf.py."""
import os
import random
import socket
import subprocess
import sys
import time
import urllib.request


_ports_given = set()


def free_port():
    """A loopback port nothing listens on, below the kernel's ephemeral range (32768 and up)
    so that no client's outgoing connection takes it while its node is down for a restart,
    and never the same one twice in this process."""
    start = random.randrange(20000, 32000)
    for i in range(12000):
        port = 20000 + (start - 20000 + i) % 12000
        if port in _ports_given:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _ports_given.add(port)
        return port
    raise RuntimeError("no free port in 20000..32000")


def say(*args):
    """Progress, on stderr (stdout carries the results)."""
    print(*args, file=sys.stderr, flush=True)


class Node:
    def __init__(self, binary, work, overrides=(), listeners=()):
        """`overrides`: more `key=value` settings, after the node's own. `listeners`: Kafka
        listeners beside PLAINTEXT, each named after its protocol (SSL, SASL_SSL, ...), so
        that no `listener.security.protocol.map` is needed."""
        self.binary, self.work, self.overrides = binary, work, list(overrides)
        self.kafka, self.quorum, self.http = free_port(), free_port(), free_port()
        self.ports = {"PLAINTEXT": self.kafka, **{name: free_port() for name in listeners}}
        self.process = None
        self.bootstrap = f"127.0.0.1:{self.kafka}"

    def listener(self, name):
        """The bootstrap address of listener `name`."""
        return f"127.0.0.1:{self.ports[name]}"

    def start(self):
        """Starts the process (again, over the same data); returns at once."""
        log = open(os.path.join(self.work, "node.log"), "a")
        self.process = subprocess.Popen([
            self.binary, "server",
            "--override", "node.id=1",
            "--override", "listeners=" + "".join(f"{name}://127.0.0.1:{port}," for name, port in self.ports.items())
            + f"CONTROLLER://127.0.0.1:{self.quorum}",
            "--override", f"controller.quorum.voters=1@127.0.0.1:{self.quorum}",
            "--override", f"http.listener=127.0.0.1:{self.http}",
            "--override", f"log.dirs={os.path.join(self.work, 'data')}",
            *[arg for override in self.overrides for arg in ("--override", override)],
        ], stdout=subprocess.DEVNULL, stderr=log)

    def wait_listening(self, timeout_s=60):
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.kafka), timeout=1).close()
                return
            except OSError:
                time.sleep(0.2)
        raise SystemExit("the node did not start")

    def wait_ready(self, timeout_s=60):
        """Until `/ready` answers 200: registered, unfenced, serving clients."""
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"the node exited ({self.process.returncode}); see {self.work}/node.log")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/ready", timeout=1) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise SystemExit("the node did not become ready")

    def stop(self, timeout_s=300):
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout_s)

    def perf(self, *args):
        """A `sluice perf ...` command line against this node."""
        return [self.binary, "perf", *args, "--bootstrap-server", self.bootstrap]

    def proc(self, name):
        return f"/proc/{self.process.pid}/{name}"

    def cpu_seconds(self):
        """User + system CPU seconds of the process so far (/proc/<pid>/stat)."""
        return sum(self.cpu_user_system_seconds())

    def cpu_user_system_seconds(self):
        """(user, system) CPU seconds of the process so far (/proc/<pid>/stat)."""
        with open(self.proc("stat")) as f:
            # The command name may hold spaces: fields are counted after its parenthesis;
            # utime and stime are the line's fields 14 and 15.
            fields = f.read().rsplit(")", 1)[1].split()
        tick = os.sysconf("SC_CLK_TCK")
        return int(fields[11]) / tick, int(fields[12]) / tick

    def rss_mib(self):
        with open(self.proc("status")) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return round(int(line.split()[1]) / 1024, 1)
        return None

    def fds(self):
        return len(os.listdir(self.proc("fd")))

    def maps(self):
        with open(self.proc("maps")) as f:
            return sum(1 for _ in f)
