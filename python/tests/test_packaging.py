"""The package as make python ships it: the tests import the wheel
installed in their interpreter's own prefix (make python-test's venv), not
a source tree or the machine-wide site, and the wheel installs offline into
a fresh venv whose python imports it with no PYTHONPATH."""

import os
import subprocess
import sys

import pytest

import xfer


def test_imported_from_the_installed_wheel():
    prefix = os.environ.get("XFER_PACKAGE_PREFIX")
    if not prefix:
        pytest.skip("XFER_PACKAGE_PREFIX is not set (make python-test sets it to its venv)")
    where = os.path.realpath(xfer.__file__)
    assert where.startswith(os.path.realpath(prefix) + os.sep), f"xfer imported from {where}, not from {prefix}"
    assert os.path.exists(os.path.join(os.path.dirname(where), "libxfer.so"))


@pytest.mark.slow
def test_wheel_installs_offline(tmp_path):
    wheel = os.environ.get("XFER_WHEEL")
    if not wheel:
        pytest.skip("XFER_WHEEL is not set (make python-test sets it to the wheel make python built)")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    subprocess.run([py, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", wheel], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "XFER_LIBRARY")}
    r = subprocess.run([py, "-c", "import xfer, xfer.mooncake; c = xfer.Connector({'protocol': 'tcp', 'host': '127.0.0.1', "
                        "'zmq_port': 0}); print(xfer.__file__, c.health()['status']); c.close()"],
                       capture_output=True, text=True, cwd=str(tmp_path), env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    path, status = r.stdout.split()
    assert path.startswith(str(venv)) and status == "healthy"

