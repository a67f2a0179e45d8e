"""A ZooKeeper ensemble's configuration, without a JVM: `--servers` parsed and checked, the
zoo.cfg a member writes, what `srvr` answers mean, and `rafka zookeeper`'s usage errors.
The ensemble running for real is tests/coordination/test_ensemble.py."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from rafka.cli.main import main
from rafka.coordination.embedded import (
    QUORUM_MAIN,
    EmbeddedZooKeeper,
    ZooKeeperAddress,
    is_embedded_server,
    stop_recorded_server,
    wait_for_exit,
)
from rafka.coordination.ensemble import (
    NOT_SERVING,
    UNREACHABLE,
    Ensemble,
    EnsembleMember,
    EnsembleServer,
    InvalidEnsembleError,
    is_local_address,
    member_settings,
    mode_of,
    parse_config,
    server_mode,
    validate_server_id,
)
from rafka.coordination.errors import (
    CoordinationError,
    ZooKeeperPortInUseError,
    ZooKeeperServerError,
)
from tests.support.cli import exit_code_in_process
from tests.support.waiting import wait_until


def test_servers_take_ids_by_position_and_default_ports() -> None:
    ensemble = Ensemble.parse("zk1:2888:3888, zk2 ,zk3:2890:3890;2182", client_port=2181)
    assert ensemble.servers == (
        EnsembleServer(1, "zk1", 2888, 3888, 2181),
        EnsembleServer(2, "zk2", 2888, 3888, 2181),
        EnsembleServer(3, "zk3", 2890, 3890, 2182),
    )
    assert ensemble.majority == 2
    assert str(ensemble.connect_string) == "zk1:2181,zk2:2181,zk3:2182"
    assert ensemble.warnings() == []


def test_servers_may_name_their_ids_and_client_addresses() -> None:
    ensemble = Ensemble.parse(
        "5=10.0.0.5:2888:3888;10.0.1.5:2181,7=10.0.0.7,9=10.0.0.9;0.0.0.0:2181")
    assert ensemble.ids == [5, 7, 9]
    # A client address listening everywhere is reached at the server's host.
    assert str(ensemble.connect_string) == "10.0.1.5:2181,10.0.0.7:2181,10.0.0.9:2181"
    assert Ensemble.parse(str(ensemble)) == ensemble


def test_the_connect_string_is_a_zookeeper_address_for_clusters() -> None:
    ensemble = Ensemble.parse("h1:2888:3888,h2:2888:3888,h3:2888:3888")
    address = ZooKeeperAddress.parse(f"{ensemble.connect_string}/chroot")
    assert address.hosts == (("h1", 2181), ("h2", 2181), ("h3", 2181))
    assert address.chroot == "/chroot"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "must be a list like"),
        ("zk1,zk2", "at least 3 servers"),
        ("zk1", "at least 3 servers"),
        ("zk1:2888,zk2,zk3", "is not 'host[:quorumPort:electionPort]"),
        ("zk1:2888:3888:observer,zk2,zk3", "observers are not supported"),
        ("1=zk1,zk2,zk3", "give every server its id"),
        ("1=zk1,1=zk2,2=zk3", "server id 1 appears twice"),
        ("0=zk1,1=zk2,2=zk3", "from 1 to 255, got 0"),
        ("254=zk1,255=zk2,256=zk3", "from 1 to 255, got 256"),
        ("zk1:0:3888,zk2,zk3", "quorum port 0 is not a port"),
        ("zk1:2888:70000,zk2,zk3", "election port 70000 is not a port"),
        ("zk1,zk1,zk3", "zk1:2888 is both server 1's quorum port and server 2's"),
        ("zk1:2888:2888,zk2,zk3", "both server 1's quorum port and server 1's election port"),
        ("h:1:2;5,h:3:4;5,h:6:7;8", "h:5 is both server 1's client port and server 2's"),
        ("0.0.0.0,zk2,zk3", "not an address the others can reach"),
        ("zk_1,zk2,zk3", "is not 'host"),
    ],
)
def test_bad_server_lists_are_refused_in_one_line(text: str, needle: str) -> None:
    with pytest.raises(InvalidEnsembleError) as raised:
        Ensemble.parse(text)
    assert needle in str(raised.value)
    assert "\n" not in str(raised.value)
    assert isinstance(raised.value, CoordinationError)  # the CLI reports it as one line


@pytest.mark.parametrize(("size", "warned"), [(3, False), (4, True), (5, False), (6, True),
                                               (7, False), (9, True)])
def test_even_or_very_large_ensembles_are_warned_about(size: int, warned: bool) -> None:
    ensemble = Ensemble.parse(",".join(f"zk{i}" for i in range(1, size + 1)))
    assert bool(ensemble.warnings()) == warned
    if size % 2 == 0:
        assert "odd number" in ensemble.warnings()[0]


def test_the_local_server_is_the_one_at_an_address_of_this_machine() -> None:
    ensemble = Ensemble.parse("10.0.0.10,10.0.0.11,10.0.0.12")
    assert ensemble.local_server(lambda host: host == "10.0.0.11").id == 2
    with pytest.raises(InvalidEnsembleError, match="no server of the ensemble"):
        ensemble.local_server(lambda host: False)
    with pytest.raises(InvalidEnsembleError, match="servers 1, 3 all name addresses"):
        ensemble.local_server(lambda host: host != "10.0.0.11")


def _foreign_address() -> str:
    """A documentation address (RFC 5737) that is on none of this machine's interfaces."""
    local = {address.address for addresses in psutil.net_if_addrs().values()
             for address in addresses}
    return next(address for address in ("192.0.2.1", "198.51.100.1", "203.0.113.1",
                                        "192.0.2.77") if address not in local)


def test_local_addresses_are_those_this_machine_can_bind() -> None:
    assert is_local_address("127.0.0.1")
    assert is_local_address("localhost")
    assert not is_local_address(_foreign_address())
    assert not is_local_address("no-such-host.invalid")  # .invalid never resolves (RFC 2606)


@pytest.mark.parametrize("value", [0, 256, -1, True, "1", 1.0])
def test_server_ids_are_1_to_255(value: object) -> None:
    with pytest.raises(InvalidEnsembleError, match="from 1 to 255"):
        validate_server_id(value)  # type: ignore[arg-type]


def test_member_settings_are_zookeeper_3_5_server_lines() -> None:
    ensemble = Ensemble.parse("zk1:2888:3888,zk2:2888:3888,zk3:2888:3888")
    assert member_settings(ensemble, 2, client_host="0.0.0.0", init_limit=10,
                           sync_limit=5) == {
        "initLimit": 10,
        "syncLimit": 5,
        "reconfigEnabled": "false",
        "server.1": "zk1:2888:3888;zk1:2181",
        "server.2": "zk2:2888:3888;0.0.0.0:2181",
        "server.3": "zk3:2888:3888;zk3:2181",
    }
    with pytest.raises(InvalidEnsembleError, match="server id 4 is not in the ensemble"):
        member_settings(ensemble, 4)
    with pytest.raises(InvalidEnsembleError, match="syncLimit must be a positive"):
        member_settings(ensemble, 1, sync_limit=0)


def test_a_member_writes_zoo_cfg_and_myid(tmp_path: Path) -> None:
    ensemble = Ensemble.on_free_ports(3)
    member = EnsembleMember(tmp_path, ensemble, 3, tick_time_ms=250, init_limit=20,
                            sync_limit=8, force_sync=False)
    assert member.port is None and member.host == "127.0.0.1"
    assert member.address == ensemble.connect_string
    path = member._write_config(ensemble.server(3).client_port)
    settings = parse_config(path.read_text())
    assert settings["tickTime"] == "250"
    assert settings["initLimit"] == "20" and settings["syncLimit"] == "8"
    assert settings["dataDir"] == str(tmp_path / "data")
    assert settings["clientPort"] == str(ensemble.server(3).client_port)
    assert settings["clientPortAddress"] == "127.0.0.1"
    assert "srvr" in settings["4lw.commands.whitelist"]
    assert settings["admin.enableServer"] == "false"  # no port 8080 for each member
    # The file says where each server's clients connect: the same ensemble, spelt out.
    recorded = Ensemble.from_settings(settings)
    assert recorded.connect_string == ensemble.connect_string
    assert [(s.id, s.host, s.quorum_port, s.election_port) for s in recorded.servers] == [
        (s.id, s.host, s.quorum_port, s.election_port) for s in ensemble.servers]
    assert (tmp_path / "data" / "myid").read_text() == "3\n"


def test_a_members_client_port_is_its_servers() -> None:
    ensemble = Ensemble.on_free_ports(3)
    with pytest.raises(TypeError, match="client port is its server's"):
        EnsembleMember("/tmp/unused", ensemble, 1, port=1234)


@pytest.fixture
def no_jvm(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any launch would be a bug in these tests: fail it rather than start a JVM."""

    def refuse(self: EmbeddedZooKeeper, port: int) -> None:
        raise AssertionError("this test must not launch ZooKeeper")

    monkeypatch.setattr(EmbeddedZooKeeper, "_launch", refuse)


def test_a_data_dir_keeps_its_member(tmp_path: Path, no_jvm: None) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "myid").write_text("2\n")
    member = EnsembleMember(tmp_path, Ensemble.on_free_ports(3), 1)
    with pytest.raises(ZooKeeperServerError, match="holds the data of ZooKeeper member 2"):
        member.start(wait_for_quorum=False)


@pytest.mark.parametrize("which", [0, 1, 2])
def test_a_taken_port_is_named_before_anything_starts(which: int, tmp_path: Path,
                                                      no_jvm: None) -> None:
    ensemble = Ensemble.on_free_ports(3)
    server = ensemble.server(1)
    port = (server.client_port, server.quorum_port, server.election_port)[which]
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port))
        holder.listen()
        member = EnsembleMember(tmp_path, ensemble, 1)
        with pytest.raises(ZooKeeperPortInUseError, match=f"127.0.0.1:{port}, its "
                           f"{('client', 'quorum', 'election')[which]} port"):
            member.start()


@pytest.mark.parametrize("host", ["foreign", "no-such-host.invalid"])
def test_a_member_must_listen_on_an_address_of_this_machine(host: str, tmp_path: Path,
                                                           no_jvm: None) -> None:
    host = _foreign_address() if host == "foreign" else host
    ensemble = Ensemble.parse(f"{host},zk2,zk3")
    member = EnsembleMember(tmp_path, ensemble, 1)
    with pytest.raises(ZooKeeperServerError, match="must name an address of this machine"):
        member.start()


def test_a_recorded_member_is_recognised_and_stopped_by_pid(tmp_path: Path) -> None:
    # A stand-in process whose command line names the quorum main class and this data dir's
    # config, as a member's does (no JVM needed to check the PID handling).
    config = str(tmp_path.resolve() / "zoo.cfg")
    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                                 QUORUM_MAIN, config])
    try:
        (tmp_path / "zookeeper.pid").write_text(f"{stand_in.pid}\n")
        # Until the child has exec'd, its command line is still the parent's: on a busy
        # machine that can take a moment.
        wait_until(lambda: is_embedded_server(stand_in.pid, tmp_path), 10,
                   "the stand-in recognised as a member by its command line")
        assert stop_recorded_server(tmp_path, timeout_s=10) == stand_in.pid
        stand_in.wait(10)
        assert wait_for_exit(stand_in.pid, 5)
    finally:
        if stand_in.poll() is None:
            stand_in.kill()
            stand_in.wait()


@pytest.mark.parametrize(
    ("answer", "mode"),
    [
        ("Zookeeper version: 3.6.3--6401e4ad2087061bc6b9f80dec2d69f2e3c8660a\nLatency "
         "min/avg/max: 0/0.0/0\nMode: follower\nNode count: 5\n", "follower"),
        ("Mode: leader\n", "leader"),
        ("Mode: standalone\n", "standalone"),
        ("This ZooKeeper instance is not currently serving requests\n", NOT_SERVING),
    ],
)
def test_srvr_answers_name_the_mode(answer: str, mode: str) -> None:
    assert mode_of(answer) == mode


def test_a_server_that_does_not_answer_is_unreachable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, not listening: connections are refused
        assert server_mode("127.0.0.1", port, timeout_s=1) == UNREACHABLE


def test_parse_config_skips_comments_and_blank_lines() -> None:
    assert parse_config("# comment\n\ntickTime = 2000\nserver.1=a:1:2;3\n") == {
        "tickTime": "2000", "server.1": "a:1:2;3"}


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["zookeeper", "start", "--servers", "a,b,c"], "--id"),
        (["zookeeper", "start", "--id", "4", "--servers", "a,b,c"],
         "server id 4 is not in the ensemble"),
        (["zookeeper", "start", "--id", "0", "--servers", "a,b,c"], "from 1 to 255"),
        (["zookeeper", "start", "--id", "1", "--servers", "a,b"], "at least 3 servers"),
        (["zookeeper", "start", "--id", "1", "--servers", "a:1,b,c"], "is not 'host"),
        (["zookeeper", "start", "--id", "1", "--servers", "a,b,c", "--sync-limit", "0"],
         "--sync-limit must be at least 1"),
        (["zookeeper", "start", "--id", "one", "--servers", "a,b,c"],
         "--id takes a number from 1 to 255 or 'auto'"),
        (["zookeeper", "start", "--id", "auto", "--servers", "a.invalid,b.invalid,c.invalid"],
         "--id auto: no server of the ensemble (a.invalid, b.invalid, c.invalid) is an address"),
        (["zookeeper", "start", "--id", "auto", "--servers",
          "127.0.0.1:1:2;3,127.0.0.1:4:5;6,127.0.0.1:7:8;9"], "servers 1, 2, 3 all name"),
        (["zookeeper", "status", "--zk", "nonsense"], "is not 'host:port'"),
    ],
)
def test_zookeeper_command_usage_errors_exit_2(argv: list[str], needle: str,
                                               capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path, no_jvm: None) -> None:
    monkeypatch.setenv("RAFKA_HOME", str(tmp_path))
    assert exit_code_in_process(argv) == 2
    assert needle in capsys.readouterr().err
    assert not any(tmp_path.iterdir()), "a usage error starts nothing"


def test_zookeeper_stop_and_status_without_a_member(capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path, no_jvm: None) -> None:
    monkeypatch.setenv("RAFKA_HOME", str(tmp_path))
    assert main(["zookeeper", "stop"]) == 0
    assert "nothing to stop" in capsys.readouterr().err
    assert main(["zookeeper", "status"]) == 1
    assert "no ZooKeeper member was started from" in capsys.readouterr().err
