"""Where an install puts things under the root, the texts it writes verbatim (the systemd unit, the
system user's sysusers entry) and the error an install stops with. Standard library only."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

PREFIX = Path("opt/tiergate")
ETC = Path("etc/tiergate")
STATE = Path("var/lib/tiergate")
UNIT = Path("etc/systemd/system/tiergate.service")
WANTS = Path("etc/systemd/system/multi-user.target.wants/tiergate.service")
SYSUSERS = Path("usr/lib/sysusers.d/tiergate.conf")
BIN_LINK = Path("usr/local/bin/tiergate")
USER = "tiergate"
MANIFEST = "MANIFEST.sha256"
INFO = "bundle.json"
CONFIG = "tiergate.toml"
KEEP_RELEASES = 3

Say = Callable[[str], None]


class InstallError(RuntimeError):
    """The install cannot go on; the message says why and what to do."""


# -- the unit -------------------------------------------------------------------------------------

UNIT_TEXT = """\
# tiergate, installed by `tiergate install`. Local changes: `systemctl edit tiergate` (a drop-in),
# not this file, which an upgrade rewrites.
[Unit]
Description=tiergate OpenAI-compatible gateway (edge model + vLLM pool)
Documentation=file:///opt/tiergate/current/README.md
After=network-online.target
Wants=network-online.target

[Service]
Type=exec
User=tiergate
Group=tiergate
ExecStart=/opt/tiergate/current/venv/bin/tiergate serve --config /etc/tiergate/tiergate.toml
ExecReload=/bin/kill -HUP $MAINPID
Restart=on-failure
RestartSec=2s
# SIGTERM: stop accepting, finish in-flight requests (server.shutdown_grace_s, 30 s), then exit.
KillSignal=SIGTERM
TimeoutStopSec=45s
Environment=HOME=/var/lib/tiergate
WorkingDirectory=/var/lib/tiergate
StateDirectory=tiergate
StateDirectoryMode=0750
ConfigurationDirectory=tiergate
StandardOutput=journal
StandardError=journal
SyslogIdentifier=tiergate
UMask=0027

# Hardening: the gateway needs its data folder, loopback/network sockets and nothing else.
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
RestrictSUIDSGID=yes
RestrictRealtime=yes
RestrictNamespaces=yes
LockPersonality=yes
RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX
SystemCallArchitectures=native
CapabilityBoundingSet=
AmbientCapabilities=

# Resource limits (raise them in a drop-in on a bigger box).
LimitNOFILE=65536
TasksMax=1024
MemoryMax=80%

[Install]
WantedBy=multi-user.target
"""

SYSUSERS_TEXT = 'u tiergate - "tiergate gateway" /var/lib/tiergate /usr/sbin/nologin\n'
