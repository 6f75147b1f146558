#!/usr/bin/env python3
"""Opens a report page (scripts/report_html.py, compare_profiles.py --html) in headless Chromium, as a person would,
and checks it: it opens within the time limit (the browser's CPU time to draw the first screen) with no console error and no network request (every request the
browser makes is recorded through the DevTools protocol's Network events), the markup and the live page point
nowhere outside the file (no src= or href= to a URL), every expected section is present and non-empty, hovering
a roofline point shows its name, the sub-block table sorts by a clicked column, the roofline toggles to kernels
where the page has kernel points, and a screenshot at 1400x900 is not blank. One line per check ("ok: ..." or
"FAIL: ..."); exit 1 when any check failed, 2 when the browser cannot be started.

    python3 test/report_check.py PAGE [--sections id,id,...] [--screenshot FILE] [--max-load-s 2]

Needs chromium, chromedriver (Debian: chromium, chromium-driver) and selenium (scripts/deps.sh installs them).
"""
import argparse
import io
import json
import os
import re
import shutil
import sys
import tempfile
import time

failures = []


def check(ok, what, detail=""):
    print(f"{'ok' if ok else 'FAIL'}: {what}{'' if ok or not detail else ': ' + detail}")
    if not ok:
        failures.append(what)
    return ok


def browser():
    """Headless Chromium through chromedriver at their Debian paths (no download of either), with the browser's
    console and the DevTools performance log (network events) recorded."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not chromium or not driver:
        print("report_check.py: error: chromium or chromedriver not found (scripts/deps.sh installs them)")
        sys.exit(2)
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,900",
                "--hide-scrollbars", "--no-first-run", "--disable-extensions", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-default-apps", "--force-device-scale-factor=1"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    d = webdriver.Chrome(options=opts, service=Service(executable_path=driver))
    # The page's viewport exactly 1400x900 (the window's size would include the browser's own frame).
    d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": 1400, "height": 900, "deviceScaleFactor": 1,
                                                             "mobile": False})
    return d


def outside_urls(text):
    """The src= and href= attributes of the page's markup (script bodies left out: Plotly's code holds URLs in
    strings it never uses here) that point outside the file."""
    markup = re.sub(r"(<script[^>]*>).*?(</script>)", r"\1\2", text, flags=re.S | re.I)
    return re.findall(r"""\b(?:src|href)\s*=\s*["']?((?:[a-z][a-z0-9+.-]*:|//)[^"'\s>]*)""", markup, flags=re.I)


def cpu_time(driver):
    """The CPU time the page's renderer main thread has used, in seconds (DevTools Performance.getMetrics)."""
    metrics = driver.execute_cdp_cmd("Performance.getMetrics", {})["metrics"]
    return next(m["value"] for m in metrics if m["name"] == "ThreadTime")


def requests_made(driver, page_url):
    """Every URL the browser asked for (DevTools Network.requestWillBeSent), other than the page itself and data
    held in the page (data:, blob:)."""
    urls = []
    for entry in driver.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg.get("method") == "Network.requestWillBeSent":
            url = msg["params"]["request"]["url"]
            if url != page_url and not url.startswith(("data:", "blob:", "about:")):
                urls.append(url)
    return urls


def load(driver, path, max_s):
    """Opens the page; checks the time it takes, console errors, requests and the markup's links."""
    url = "file://" + os.path.abspath(path)
    with open(path, encoding="utf-8") as f:
        links = outside_urls(f.read())
    check(not links, "the markup loads nothing from outside the file", ", ".join(links)[:500])
    # The page shows its text and tables first, then runs Plotly's code and draws the charts. Timed from the
    # navigation: the first screen shown (the load event: header, findings and tables drawn) and its charts drawn
    # (the page's "charts-drawn" mark), in wall time, and the renderer main thread's CPU time until the charts are
    # drawn: what the page costs the browser, which the wall time equals on a quiet machine (other work on the
    # cores stretches the wall time).
    with tempfile.TemporaryDirectory() as tmp:  # a blank file:// page first: the same renderer as the page's
        with open(os.path.join(tmp, "blank.html"), "w", encoding="utf-8") as f:
            f.write("<!DOCTYPE html><title>blank</title>")
        driver.get("file://" + os.path.join(tmp, "blank.html"))
    driver.execute_cdp_cmd("Performance.enable", {"timeDomain": "threadTicks"})
    driver.get_log("performance")  # the blank page's requests: drained
    before = cpu_time(driver)
    driver.get(url)
    for _ in range(200):
        if driver.execute_script("return document.body.dataset.charts;"):
            break
        time.sleep(0.05)
    cpu = cpu_time(driver) - before
    shown, drawn = driver.execute_script(
        "const m = performance.getEntriesByName('charts-drawn')[0];"
        "return [performance.getEntriesByType('navigation')[0].loadEventEnd / 1e3, m ? m.startTime / 1e3 : null];")
    check(shown < max_s, f"opens in {shown:.2f} s: header, findings and tables shown (under {max_s} s)")
    # Plotly's own code is a second or more of that; the bound catches a page gone slow, not a busy machine.
    check(drawn is not None and cpu < 3 * max_s,
          f"its charts drawn {drawn or 0:.2f} s after navigating, with {cpu:.2f} s of the browser's CPU time (under "
          f"{3 * max_s:g} s)")
    errors = [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
    check(not errors, "no console error", "; ".join(errors)[:500])
    reqs = requests_made(driver, url)
    check(not reqs, "no network request", ", ".join(reqs)[:500])
    live = driver.execute_script("return [...document.querySelectorAll('[src],[href]')].map((e) => e.getAttribute('src') "
                                 "|| e.getAttribute('href')).filter((u) => !u.startsWith('#'));")
    check(not live, "the live page links nowhere outside the file", ", ".join(live)[:500])


def sections(driver, expected):
    """Each expected section present, with text or a drawn chart in it; prints the page's sections."""
    found = driver.execute_script("return [...document.querySelectorAll('main > section')].map((s) => s.id);")
    print(f"sections: {','.join(found)}")
    for sid in found:  # a section is drawn as it comes near the screen
        driver.execute_script("document.getElementById(arguments[0]).scrollIntoView();", sid)
        for _ in range(100):
            if driver.execute_script("return document.getElementById(arguments[0]).dataset.drawn;", sid):
                break
            time.sleep(0.05)
    for sid in expected:
        stats = driver.execute_script(
            "const c = document.getElementById(arguments[0] + '-content'); if (!c) return null;"
            "return [c.innerText.trim().length, c.querySelectorAll('.js-plotly-plot .main-svg').length,"
            "        c.querySelectorAll('table tbody tr').length];", sid)
        check(stats is not None and (stats[0] > 0 or stats[1] > 0), f"section {sid} present and not empty",
              "missing" if stats is None else "empty")
    plots = driver.execute_script("return [document.querySelectorAll('.plot').length,"
                                  " document.querySelectorAll('.plot.js-plotly-plot').length];")
    check(plots[0] == plots[1], f"every chart drawn ({plots[1]} of {plots[0]})")


def hover_roofline(driver):
    """Hovers the roofline's most isolated sub-block point and checks that the hover label names it."""
    from selenium.webdriver.common.action_chains import ActionChains

    driver.execute_script("document.getElementById('roofline').scrollIntoView();")
    target = driver.execute_script("""
        const gd = document.querySelector('#roofline .js-plotly-plot');
        const pts = [];
        gd.querySelectorAll('.scatterlayer .trace').forEach((tr) => tr.querySelectorAll('path.point').forEach((p) => {
            const d = p.__data__, t = tr.__data__ && tr.__data__[0] && tr.__data__[0].trace;
            if (!t || t.meta !== 'subblock') return;
            const r = p.getBoundingClientRect();
            pts.push({el: p, x: r.x + r.width / 2, y: r.y + r.height / 2, name: t.text[d.i]});
        }));
        let best = null, bestD = -1;
        for (const a of pts) {
            let d = Infinity;
            for (const b of pts) if (a !== b) d = Math.min(d, Math.hypot(a.x - b.x, a.y - b.y));
            if (d > bestD) best = a, bestD = d;
        }
        if (!best) return null;
        best.el.setAttribute('data-hover-target', '1');
        return best.name;""")
    if not check(target is not None, "the roofline has sub-block points to hover"):
        return
    el = driver.find_element("css selector", "[data-hover-target]")
    ActionChains(driver).move_to_element(el).pause(0.3).perform()
    text = hover_text(driver, "roofline")
    check(target in text, f"hovering the roofline point '{target}' shows its name", f"hover text: '{text}'")


def hover_text(driver, chart):
    """The hover labels shown in the chart with this id (waiting up to 2 s for Plotly to draw them), joined."""
    text = ""
    for _ in range(20):
        text = driver.execute_script(f"return [...document.querySelectorAll('#{chart} .hoverlayer .hovertext')]"
                                     ".map((h) => h.textContent).join(' | ');")
        if text:
            break
        time.sleep(0.1)
    return text


def hover_energy(driver):
    """Hovers the top of the tallest bar of the energy per sub-block chart and checks that the hover label names the
    sub-block and phase and gives its power."""
    from selenium.webdriver.common.action_chains import ActionChains

    if not driver.find_elements("id", "energy-table"):
        print("energy chart: no energy per sub-block in this profile")
        return
    target = driver.execute_script("""
        const gd = document.getElementById('energy-chart');
        const trace = gd && gd.querySelector('.barlayer .trace');  // the first: J per step, with its hover
        if (!trace) return null;
        let best = null;
        trace.querySelectorAll('.point path').forEach((p) => {
            const r = p.getBoundingClientRect();
            if (!best || r.height > best.h) best = {el: p, h: r.height, i: p.parentNode.__data__.i};
        });
        if (!best) return null;
        best.el.setAttribute('data-energy-target', '1');
        return [gd.data[0].x[best.i], best.h];""")
    if not check(target is not None, "the energy chart has bars to hover"):
        return
    name, height = target
    el = driver.find_element("css selector", "[data-energy-target]")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", el)
    ActionChains(driver).move_to_element_with_offset(el, 0, -height / 2 + 3).pause(0.3).perform()  # above the inner bar
    text = hover_text(driver, "energy-chart")
    check(name in text and " W, " in text, f"hovering the energy bar '{name}' shows its name and power",
          f"hover text: '{text}'")


def toggle_kernels(driver):
    """Where the page has kernel points, the toggle shows them instead of the sub-blocks."""
    button = driver.find_elements("css selector", "#roofline-toggle button[data-view=kernels]")
    if not button or button[0].get_attribute("disabled") is not None:
        print("kernels toggle: no kernel points in this profile")
        return
    button[0].click()
    vis = driver.execute_script("const gd = document.querySelector('#roofline .js-plotly-plot');"
                                "return gd.data.filter((t) => t.meta).map((t) => [t.meta, t.visible !== false]);")
    check(all(v == (m == "kernel") for m, v in vis), "the roofline toggle shows the kernels alone", str(vis))
    driver.find_element("css selector", "#roofline-toggle button[data-view=subblocks]").click()


def sort_table(driver):
    """Clicking the sub-block table's ms/step heading sorts its rows by it, descending, then ascending."""
    def column():
        return driver.execute_script(
            "const t = document.getElementById('subblock-table');"
            "const i = [...t.querySelectorAll('th')].findIndex((h) => h.dataset.key === 'ms_per_step');"
            "return [...t.querySelectorAll('tbody tr')].map((r) => parseFloat(r.children[i].dataset.value));")
    before = column()
    heading = driver.find_element("css selector", "#subblock-table th[data-key=ms_per_step]")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", heading)
    heading.click()
    down = column()
    heading.click()
    up = column()
    check(len(down) > 1 and down == sorted(before, reverse=True) and down != before,
          f"clicking ms/step sorts the sub-block table's {len(down)} rows, largest first", str(down[:5]))
    check(up == sorted(before), "a second click sorts them smallest first", str(up[:5]))


def screenshot(driver, path):
    """A 1400x900 screenshot of the page's top: not blank (many colours, much that is not background)."""
    from PIL import Image

    driver.execute_script("window.scrollTo(0, 0);")
    png = driver.get_screenshot_as_png()
    img = Image.open(io.BytesIO(png)).convert("RGB")
    colors = img.getcolors(maxcolors=1 << 20) or []
    background = max(colors)[0] if colors else 0
    filled = 1 - background / (img.width * img.height)
    check(img.size == (1400, 900) and len(colors) > 50 and filled > 0.2,
          f"screenshot {img.width}x{img.height} not blank ({len(colors)} colours, {100 * filled:.0f}% not background)")
    if path:
        with open(path, "wb") as f:
            f.write(png)
        print(f"wrote {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("page")
    ap.add_argument("--sections", default="", help="ids of the sections the page must have, comma-separated")
    ap.add_argument("--screenshot", help="also write the 1400x900 screenshot here")
    ap.add_argument("--max-load-s", type=float, default=2.0)
    args = ap.parse_args()
    try:
        from selenium.common.exceptions import WebDriverException
    except ImportError:
        print("report_check.py: error: selenium is not installed (scripts/deps.sh installs it)")
        sys.exit(2)
    driver = browser()
    try:
        load(driver, args.page, args.max_load_s)
        steps = [lambda: sections(driver, [s for s in args.sections.split(",") if s])]
        if driver.find_elements("id", "roofline"):
            steps += [lambda: hover_roofline(driver), lambda: toggle_kernels(driver)]
        if driver.find_elements("id", "subblock-table"):
            steps.append(lambda: sort_table(driver))
        steps.append(lambda: hover_energy(driver))  # where the page has energy per sub-block, drawn by now
        steps.append(lambda: screenshot(driver, args.screenshot))
        for step in steps:
            try:
                step()
            except WebDriverException as e:  # an element the check needs is missing or cannot be used
                check(False, "the page can be used as a person would", e.msg.splitlines()[0] if e.msg else str(e))
    finally:
        driver.quit()
    print(f"{len(failures)} failed" if failures else "all checks passed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
