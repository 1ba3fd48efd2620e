"""Render HTML pages in a real headless browser (Chromium) for the tests.

``dump_dom(path)`` returns the DOM after the page has loaded, as the browser serializes it.
``probe_images(path, tmp_dir)`` does the same for a copy of the page with a small probe script
that records, on each ``<img>``, whether the browser decoded it (``data-probe-complete``) and its
natural size (``data-probe-width``/``-height``); the probe copy drops the page's Content-Security-
Policy, which (rightly) forbids scripts in the page itself.

Tests that need the browser use ``requires_chromium``: skipped when no Chromium is installed, but
run (and so fail in ``dump_dom``) when ``JAXGRADE_REQUIRE_CHROMIUM=1``, as in CI.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    """The browser to use: $JAXGRADE_CHROMIUM, else the first of CANDIDATES on the PATH."""
    explicit = os.environ.get("JAXGRADE_CHROMIUM")
    if explicit:
        return shutil.which(explicit) or (explicit if Path(explicit).is_file() else None)
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def chromium_required() -> bool:
    return os.environ.get("JAXGRADE_REQUIRE_CHROMIUM", "") not in ("", "0")


requires_chromium = pytest.mark.skipif(
    find_chromium() is None and not chromium_required(),
    reason="no Chromium on this machine (set JAXGRADE_REQUIRE_CHROMIUM=1 to make this a failure)",
)


class BrowserError(RuntimeError):
    pass


def dump_dom(path: Path, *, timeout: float = 90.0, extra_args: tuple[str, ...] = ()) -> str:
    """The serialized DOM of the file at ``path`` after Chromium (headless) loaded it."""
    exe = find_chromium()
    if exe is None:
        raise BrowserError(
            "Chromium is required (JAXGRADE_REQUIRE_CHROMIUM is set) but none was found; "
            "install it (apt-get install chromium) or point JAXGRADE_CHROMIUM at it"
        )
    url = Path(path).resolve().as_uri()
    with tempfile.TemporaryDirectory(prefix="jaxgrade-chromium-") as profile:
        cmd = [
            exe,
            "--headless",
            "--no-sandbox",  # we may run as root, where Chromium's sandbox refuses to start
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--mute-audio",
            f"--user-data-dir={profile}",
            "--virtual-time-budget=5000",  # let load handlers and image decoding finish
            *extra_args,
            "--dump-dom",
            url,
        ]
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group, so a hung browser is killed whole
        )
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise BrowserError(f"Chromium did not finish rendering {path} in {timeout:g}s") from None
        finally:
            if proc.poll() is None:  # pragma: no cover - only when communicate raised otherwise
                os.killpg(proc.pid, signal.SIGKILL)
    dom = out.decode("utf-8", "replace")
    if proc.returncode != 0 or "<html" not in dom.lower():
        tail = err.decode("utf-8", "replace")[-2000:]
        raise BrowserError(f"Chromium failed on {path} (exit {proc.returncode}): {tail}")
    return dom


_CSP = re.compile(r"<meta http-equiv=\"Content-Security-Policy\"[^>]*>", re.IGNORECASE)
_PROBE = """<script>
window.addEventListener("load", function () {
  document.documentElement.setAttribute("data-probe-loaded", "1");
  for (const img of document.images) {
    img.setAttribute("data-probe-complete", String(img.complete));
    img.setAttribute("data-probe-width", String(img.naturalWidth));
    img.setAttribute("data-probe-height", String(img.naturalHeight));
  }
});
</script>
"""


def probe_images(path: Path, tmp_dir: Path, *, timeout: float = 90.0) -> str:
    """The DOM of a probed copy of the page: each <img> carries what the browser made of it."""
    html = Path(path).read_text(encoding="utf-8")
    probed = _CSP.sub("", html, count=1).replace("</body>", _PROBE + "</body>", 1)
    copy = Path(tmp_dir) / f"probe-{Path(path).name}"
    copy.write_text(probed, encoding="utf-8")
    return dump_dom(copy, timeout=timeout)
