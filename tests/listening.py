"""Which TCP sockets a process tree listens on, read from /proc (no psutil)."""
from __future__ import annotations

import ipaddress
import os
import socket
import struct

from conftest import children_of

LISTEN = "0A"   # TCP_LISTEN in /proc/net/tcp's st column


def _address(hex_addr: str) -> str:
    words = [struct.pack("<I", int(hex_addr[i:i + 8], 16)) for i in range(0, len(hex_addr), 8)]
    family = socket.AF_INET if len(words) == 1 else socket.AF_INET6
    return socket.inet_ntop(family, b"".join(words))


def _listening_by_inode() -> dict[str, tuple[str, int]]:
    found = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.read().splitlines()[1:]:
                fields = line.split()
                if fields[3] == LISTEN:
                    addr, port = fields[1].split(":")
                    found[fields[9]] = (_address(addr), int(port, 16))
    return found


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return inodes
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def process_tree(pid: int) -> list[int]:
    tree = [pid]
    for child in children_of(pid):
        tree += process_tree(child)
    return tree


def listening(pid: int) -> set[tuple[int, str, int]]:
    """(pid, address, port) of every listening TCP socket of `pid` and its descendants."""
    table = _listening_by_inode()
    return {(p, *table[i]) for p in process_tree(pid) for i in _socket_inodes(p) if i in table}


def beyond_loopback(sockets) -> set:
    """The sockets whose address is not loopback (127.0.0.0/8, ::1, or v4-mapped loopback)."""
    def loopback(addr: str) -> bool:
        ip = ipaddress.ip_address(addr)
        mapped = getattr(ip, "ipv4_mapped", None)
        return (mapped or ip).is_loopback
    return {s for s in sockets if not loopback(s[1])}
