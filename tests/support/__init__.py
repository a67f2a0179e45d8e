"""What the tests share, so that conftest files hold fixtures only and no test module imports
another: import it as ``from tests.support.<module> import ...``.

- ``waiting``: ``wait_until`` (an AssertionError when the time is up) and ``eventually``;
- ``zookeeper``: a chroot of a test's own, expiring a ZooKeeper session, a TCP proxy to cut one;
- ``cluster``: the test clusters' broker config, clusters a module has of its own, a partition's
  state;
- ``faults``: a broker's session expired on the server, a broker paused as a whole;
- ``replicas``: one partition replica on its replica host, reached directly;
- ``workloads``: a producer writing until stopped, the final log read back and judged;
- ``checker``: the Jepsen-style checker of a workload's history;
- ``processes``: the processes a subprocess under test started, found by a marker;
- ``cli``: running ``rafka`` as a user does, in a subprocess;
- ``kafka_clients``: what every unmodified Kafka client's tests go through;
- ``logstore``: small log configs, batches and a fake clock for the log store tests.
- ``testbed``: network hosts on one machine (Linux network namespaces on a bridge of their
  own), with faults: links cut both ways or one way, nodes isolated, paused or killed.
"""
