"""A real OpenID provider for the single sign-on tests: panva's certified ``oidc-provider`` run by
node on loopback (provider.mjs; scripts/setup.sh installs its pinned version into node_modules/).

The provider's issuer is ``http://localhost:<port>`` while the gateway is ``http://127.0.0.1:<port>``:
two different sites to the browser, so the sign-in crosses sites as it does with a real provider
(SameSite cookie rules apply as they would).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
PASSWORD = "correct horse"  # provider.mjs's PASSWORD
CLIENT_ID = "tiergate"
CLIENT_SECRET = "tiergate-test-secret"
OTHER_CLIENT = ("other-app", "other-app-secret")


def node_path() -> str | None:
    return shutil.which("node")


@dataclass
class OpenIDProvider:
    port: int
    gateway_port: int  # the gateway registered as a client here listens on it
    log_path: Path
    process: subprocess.Popen[bytes] | None = field(default=None)

    @property
    def issuer(self) -> str:
        return f"http://localhost:{self.port}"

    @property
    def direct(self) -> str:
        """The same provider by address, for the test's own HTTP calls."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        node = node_path()
        if node is None:
            raise RuntimeError("node is not installed")
        if not (HERE / "node_modules" / "oidc-provider").is_dir():
            raise RuntimeError(f"oidc-provider is not installed in {HERE}/node_modules: run scripts/setup.sh")
        env = {
            "ISSUER": self.issuer,
            "PORT": str(self.port),
            "GATEWAY": f"http://127.0.0.1:{self.gateway_port}",
            "PATH": "/usr/bin:/bin",
        }
        self.process = subprocess.Popen(
            [node, str(HERE / "provider.mjs")],
            cwd=HERE,
            env=env,
            stdout=self.log_path.open("ab"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the provider exited: {self.log_path.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.direct}/jwks", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("the provider did not start within 30 s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)

    def rotate_keys(self) -> None:
        """Restart on the same port: a new signing key (a new ``kid``), as a provider's rotation."""
        self.stop()
        self.start()

    def kids(self) -> list[str]:
        return [k["kid"] for k in httpx.get(f"{self.direct}/jwks").json()["keys"]]

    def set_id_token_ttl(self, seconds: int) -> None:
        httpx.post(f"{self.direct}/test/id-token-ttl", params={"seconds": seconds}).raise_for_status()

    def tamper_next_id_token(self) -> None:
        httpx.post(f"{self.direct}/test/tamper-next-id-token").raise_for_status()
