"""The shared test helpers in ``conftest.py``: one meaning of "under CI", free ports, waiting for a port."""

from __future__ import annotations

import socket

import pytest

from conftest import RAY_PORTS, free_port, under_ci, wait_for_port


@pytest.mark.parametrize("value, want", [(None, False), ("", False), (" ", False), ("0", False), ("false", False),
                                         ("No", False), ("OFF", False), ("true", True), ("1", True), ("yes", True),
                                         ("True ", True)])
def test_under_ci_means_the_ci_variable_is_set_to_a_true_value(monkeypatch, value, want):
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    assert under_ci() is want


class _FirstDraws:
    """An ``avoid`` set that holds the first ``n`` ports asked about: free_port must draw again."""

    def __init__(self, n: int) -> None:
        self.n, self.asked = n, []

    def __contains__(self, port) -> bool:
        self.asked.append(port)
        return len(self.asked) <= self.n


def test_free_port_draws_again_until_it_avoids_the_given_ports():
    avoid = _FirstDraws(3)
    port = free_port(avoid=avoid)
    assert len(avoid.asked) == 4 and avoid.asked[-1] == port
    with socket.socket() as s:  # free: it binds
        s.bind(("127.0.0.1", port))
    assert all(free_port(avoid=RAY_PORTS) not in RAY_PORTS for _ in range(20))


def test_wait_for_port_returns_once_the_port_listens_and_fails_clearly_otherwise():
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port = srv.getsockname()[1]
        assert wait_for_port("127.0.0.1", port, 5, "the test server") < 5
    with pytest.raises(pytest.fail.Exception, match=rf"the test server at 127.0.0.1:{port} accepted no connection "
                                                   r"within 0.5 s \(last error: .*\)\nlog tail"):
        wait_for_port("127.0.0.1", port, 0.5, "the test server", lambda: "\nlog tail")
