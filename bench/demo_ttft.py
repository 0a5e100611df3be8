"""The demo deployment's time to first token as the playground shows it, in a real browser.

Against a running `make run` (its demo deployment Running): logs in, opens the playground,
sends the same short prompt N times to the deployment and prints, for each, the TTFT the
server measured and the one the browser measured (the page's own cells), then the spread.

    SHARDBOARD_ADMIN_PASSWORD=... .venv/bin/python bench/demo_ttft.py \
        [--url http://127.0.0.1:8000] [--deployment demo] [--runs 5]

Debian's chromium (/usr/bin/chromium), as the browser tests use.
"""

from __future__ import annotations

import argparse
import os
import statistics

import httpx
from playwright.sync_api import expect, sync_playwright

CHROMIUM = "/usr/bin/chromium"


def _ms(text: str) -> float:
    return float(text.removesuffix(" ms"))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--user", default="admin")
    ap.add_argument("--deployment", default="demo")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=32)
    args = ap.parse_args()
    password = os.environ["SHARDBOARD_ADMIN_PASSWORD"]
    httpx.get(f"{args.url}/accounts/login/", timeout=30).raise_for_status()
    server, browser = [], []
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = chromium.new_page()
        page.goto(f"{args.url}/accounts/login/")
        page.fill("input[name=username]", args.user)
        page.fill("input[name=password]", password)
        page.click("button[type=submit]")
        page.wait_for_url(lambda url: "/accounts/login/" not in url)
        for i in range(args.runs):
            page.goto(f"{args.url}/playground/")
            page.select_option("#deployment", args.deployment)
            page.fill(".pg-msg textarea", "Write one sentence about GPUs.")
            page.fill("#max-tokens", str(args.max_tokens))
            page.fill("#seed", str(i))
            page.click("#send")
            pane = page.locator('.pane[data-slot="a"]')
            expect(pane.locator(".pane-status")).to_have_text("done", timeout=120_000)
            s = _ms(pane.locator(".m-ttft-server").inner_text())
            b = _ms(pane.locator(".m-ttft-browser").inner_text())
            tokens = pane.locator(".m-completion-server").inner_text()
            print(f"run {i + 1}: TTFT server {s:.0f} ms, browser {b:.0f} ms ({tokens} tokens)")
            server.append(s)
            browser.append(b)
        chromium.close()
    for name, xs in (("server", server), ("browser", browser)):
        print(
            f"TTFT {name}: median {statistics.median(xs):.0f} ms, "
            f"min {min(xs):.0f}, max {max(xs):.0f} over {len(xs)} runs"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
