"""Free loopback ports for the multi-process tests."""

import socket


def free_ports(n):
    """``n`` distinct ports that were free on 127.0.0.1 a moment ago."""
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports
