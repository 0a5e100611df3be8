"""Walk a running Shardboard end to end in a real browser and save a screenshot of each page.

    .venv/bin/python scripts/tour.py --url http://127.0.0.1:8000 --user admin --password PW \
        [--out docs/tour] [--keep]

Logs in, opens the dashboard, the models page and the first local model's plan, launches that
plan, waits for it to run, asks it a question in the playground, stops it, and ends on the
topology and audit pages. It is the smoke test of `make run` on a new machine (it fails with
a message at the first step that does not work) and it makes the README's pictures.
Needs Playwright (installed by `make test`'s set-up) and Debian's chromium.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"


class TourError(RuntimeError):
    pass


def step(name: str) -> None:
    print(f"--> {name}", flush=True)


def shot(page: Any, out: Path, name: str) -> None:
    path = out / f"{name}.png"
    page.screenshot(path=str(path), full_page=False)
    print(f"    saved {path}")


def wait_status(page: Any, want: set[str], timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    status = ""
    while time.monotonic() < deadline:
        status = (page.locator("#status").inner_text() or "").strip().lower()
        if status in want:
            return status
        if status == "failed" and "failed" not in want:
            raise TourError(f"the deployment failed: {page.locator('main').inner_text()[:600]}")
        time.sleep(0.5)
    raise TourError(f"status is {status!r} after {timeout_s:.0f} s, expected one of {want}")


def tour(page: Any, url: str, user: str, password: str, out: Path, keep: bool) -> None:
    step("log in")
    page.goto(f"{url}/accounts/login/")
    page.fill("input[name=username]", user)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(lambda u: "/accounts/login/" not in u, timeout=10_000)

    step("dashboard: live GPU charts")
    page.goto(f"{url}/")
    page.wait_for_selector(".js-plotly-plot", timeout=15_000)
    page.wait_for_timeout(3_000)  # a few live samples
    shot(page, out, "1-dashboard")

    step("models: search and local models")
    page.goto(f"{url}/models/")
    page.wait_for_selector(".model-card", timeout=15_000)
    shot(page, out, "2-models")
    local = page.locator("a[href^='/models/local/']").first
    if local.count() == 0:
        raise TourError("no local model is listed (make run generates one under var/models/)")
    local.click()
    page.wait_for_function(
        "() => document.getElementById('plan-chart')?.data !== undefined", timeout=15_000
    )
    shot(page, out, "3-plan")

    step("launch the plan")
    if page.locator("#launch-button").is_disabled():
        raise TourError(
            f"Launch is disabled: {page.locator('#plan-panel, main').first.inner_text()[:400]}"
        )
    page.click("#launch-button")
    page.wait_for_url("**/deployments/**", timeout=15_000)
    if page.locator("form#launch-form").count():  # the plan needs a name or a change first
        errors = page.locator(".error, .errorlist").all_inner_texts()
        raise TourError(f"the launch form came back: {errors}")
    page.wait_for_selector("#status", timeout=15_000)
    detail = page.url
    wait_status(page, {"running"}, timeout_s=300)
    name = page.locator("h1").first.inner_text().split()[0]
    page.wait_for_timeout(2_000)
    shot(page, out, "4-deployment")

    step("playground: a streamed answer with TTFT and tokens/s")
    page.goto(f"{url}/playground/")
    page.select_option("#deployment", name)
    # Completion mode: the demo model has random weights, and in chat it mostly says newlines.
    page.click("input[name=mode][value=completion]")
    page.fill("#prompt", "Shardboard plans, launches and watches")
    page.fill("#max-tokens", "32")
    page.click("#send")
    pane = page.locator('.pane[data-slot="a"]')
    deadline = time.monotonic() + 60
    while pane.locator(".pane-status").inner_text().strip() != "done":
        if time.monotonic() > deadline:
            raise TourError(f"no answer: {pane.inner_text()[:400]}")
        page.wait_for_timeout(250)
    shot(page, out, "5-playground")

    page.goto(f"{url}/deployments/")
    page.wait_for_timeout(500)
    shot(page, out, "6-deployments")
    if not keep:
        step("stop it")
        page.goto(detail)
        page.once("dialog", lambda dialog: dialog.accept())
        page.click("#stop-button")
        wait_status(page, {"stopped"}, timeout_s=60)

    step("topology and audit")
    page.goto(f"{url}/gpus/topology/")
    page.wait_for_timeout(500)
    shot(page, out, "7-topology")
    page.goto(f"{url}/audit/")
    page.wait_for_timeout(500)
    shot(page, out, "8-audit")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--user", default="admin")
    parser.add_argument("--password", required=True)
    parser.add_argument("--out", type=Path, default=Path("docs/tour"))
    parser.add_argument("--keep", action="store_true", help="leave the deployment running")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        try:
            tour(page, args.url.rstrip("/"), args.user, args.password, args.out, args.keep)
        except (TourError, PlaywrightError) as exc:
            shot(page, args.out, "failed")
            print(f"tour failed at {page.url}: {exc}", file=sys.stderr)
            return 1
        finally:
            browser.close()
    print("tour complete")
    return 0


if __name__ == "__main__":
    sys.exit(main())
