"""`make lab`, the reader's command: JupyterLab starts on notebooks/, opens a percent script as a
notebook through jupytext, on a kernel of this environment, with the widgets extension (slow)."""

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
TOKEN = "geofact-lab-test"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> dict:
    request = urllib.request.Request(url, headers={"Authorization": f"token {TOKEN}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def lab(repo):
    port = free_port()
    flags = f"--no-browser --ip=127.0.0.1 --port={port} --ServerApp.token={TOKEN} --ServerApp.open_browser=False"
    # VENV names the environment running the tests and STAMP a file that exists, so `make` neither
    # builds another environment nor reinstalls this one (the install is order-only for `lab`)
    venv = Path(sys.executable).parent.parent
    server = subprocess.Popen(["make", "-s", "lab", f"VENV={venv}", f"STAMP={sys.executable}", f"LAB_FLAGS={flags}"],
                              cwd=repo.root,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            if server.poll() is not None:
                pytest.fail(f"make lab exited with {server.returncode}:\n{server.stdout.read()[-3000:]}")
            try:
                get(f"{base}/api/status")
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("JupyterLab did not answer within 60 s")
        yield base, venv
    finally:
        subprocess.run(["pkill", "-TERM", "-s", str(server.pid)])
        server.wait(timeout=30)


def test_a_percent_script_opens_as_a_notebook(lab, repo):
    base, _ = lab
    nb = get(f"{base}/api/contents/exp-capacity.py?type=notebook&content=1")
    assert nb["type"] == "notebook"
    cells = nb["content"]["cells"]
    assert any("parameters" in c["metadata"].get("tags", []) for c in cells)  # papermill's cell, for the reader to edit
    assert nb["content"]["metadata"]["kernelspec"]["name"] == "python3"


def test_the_kernel_is_this_environment_and_the_widgets_extension_is_there(lab):
    base, venv = lab
    assert "python3" in get(f"{base}/api/kernelspecs")["kernelspecs"]  # what the notebooks' headers name
    # ipykernel's own spec, installed in this environment ("python" in its argv is the server's interpreter)
    listed = subprocess.run([str(venv / "bin" / "jupyter"), "kernelspec", "list", "--json"], capture_output=True, text=True)
    resource_dir = Path(json.loads(listed.stdout)["kernelspecs"]["python3"]["resource_dir"])
    assert resource_dir.resolve().is_relative_to(venv.resolve())
    extensions = subprocess.run([str(venv / "bin" / "jupyter"), "labextension", "list"], capture_output=True, text=True)
    assert "jupyterlab-jupytext" in extensions.stderr + extensions.stdout
    assert "@jupyter-widgets/jupyterlab-manager" in extensions.stderr + extensions.stdout
    settings = json.loads((venv / "share" / "jupyter" / "lab" / "settings" / "overrides.json").read_text())
    assert settings["@jupyterlab/docmanager-extension:plugin"]["defaultViewers"]["python"] == "Jupytext Notebook"
