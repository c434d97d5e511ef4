"""``python -m moestat.sglang.launch_server <sglang.launch_server arguments>``

Starts ``python -m sglang.launch_server`` with the same arguments such that every process of
the server records with moestat (see install.py).
"""

import os
import sys
from pathlib import Path

AUTOINSTALL_DIR = Path(__file__).resolve().parent / "_autoinstall"


def server_environment(environment):
    """``environment`` with moestat's install hook on PYTHONPATH and switched on."""
    environment = dict(environment)
    paths = [str(AUTOINSTALL_DIR)] + [p for p in environment.get("PYTHONPATH", "").split(os.pathsep) if p]
    environment["PYTHONPATH"] = os.pathsep.join(paths)
    environment["MOESTAT_SGLANG_INSTALL"] = "1"
    return environment


def main(argv=None, module="sglang.launch_server"):
    argv = sys.argv[1:] if argv is None else argv
    os.execve(sys.executable, [sys.executable, "-m", module, *argv],
              server_environment(os.environ))


if __name__ == "__main__":
    main()
