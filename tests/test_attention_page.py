#!/usr/bin/env python3
"""compare_attention --html in a real browser: Debian's chromium, headless, driven by python3-selenium.

The page for a committed learned model against the construction at TA(10, 10) is written, checked for its
size and for any reference to the network, and opened from a file URL with the browser offline (no
console error, no resource fetched). Selecting a query as a user does (a click on its cell; a click on a
prediction row) shows, for the constructed model's digit_sum head, the keys the construction defines:
the query that predicts B_k's t-th digit reads the t-th digits of A_k and B_(k-1) (docs/construction.md;
the indices come from the format's arithmetic here, not from the page). A hover shows a token's
position IDs. A screenshot is taken and its size checked. Bad options exit 2.

    python3 tests/test_attention_page.py COMPARE_ATTENTION SOURCE_DIR

Exit 0 passed, 1 failed, 77 skipped (chromium, chromedriver or selenium missing: the reason is printed)."""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

MODEL = "models/cpu-sa1010-1l4h-d64"
N, M = 10, 10


def skip(why):
    print(f"test_attention_page: skipped: {why}")
    sys.exit(77)


def fail(why):
    print(f"test_attention_page: FAILED: {why}")
    sys.exit(1)


def layout_index(l, m, what, k, t=None):
    """Index of a token in $ A_1 + .. + A_m = B_0 > B_1 > .. > B_m (A: most significant first, B: least)."""
    eq = m * (l + 1)
    if what == "A":
        return 1 + (k - 1) * (l + 1) + (l - t)
    if what == "B":
        start = eq + 1 if k == 0 else eq + 1 + l + (k - 1) * (l + 1) + 1
        return start + t - 1
    raise ValueError(what)


def run_tool(tool, args, want_rc):
    r = subprocess.run([tool] + args, capture_output=True, text=True, timeout=300)
    if r.returncode != want_rc:
        fail(f"{' '.join(args)}: exit {r.returncode}, wanted {want_rc}\n{r.stdout}\n{r.stderr}")
    return r


def page_data(html):
    start = html.index('<script id="page-data" type="application/json">') + len(
        '<script id="page-data" type="application/json">')
    return json.loads(html[start:html.index("</script>", start)].replace("<\\/", "</"))


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n":
        fail(f"{path} is not a PNG")
    return struct.unpack(">II", head[16:24])


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    tool, src = sys.argv[1], sys.argv[2]
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service
        from selenium.webdriver.common.action_chains import ActionChains
        from selenium.webdriver.common.by import By
    except ImportError as e:
        skip(f"python3-selenium is not installed ({e}); ./x installs it")
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_bin = shutil.which("chromedriver")
    if not browser or not driver_bin:
        skip("chromium or chromedriver is not installed (Debian: chromium, chromium-driver); ./x installs them")

    with tempfile.TemporaryDirectory() as tmp:
        page = os.path.join(tmp, "page.html")
        model = os.path.join(src, MODEL)
        run_tool(tool, ["--learned", model, "--n", str(N), "--m", str(M), "--samples", "20", "--out",
                        os.path.join(tmp, "cmp"), "--html", page, "--quiet"], 0)
        # Bad input: a page in a folder that does not exist, a page of a grid, a malformed problem.
        run_tool(tool, ["--learned", model, "--html", os.path.join(tmp, "no", "page.html"), "--samples", "2",
                        "--out", os.path.join(tmp, "c2")], 2)
        run_tool(tool, ["--learned", model, "--grid", "--html", page, "--samples", "2", "--out", os.path.join(tmp, "c3")], 2)
        run_tool(tool, ["--learned", model, "--problem", "12+x4", "--html", page, "--out", os.path.join(tmp, "c4")], 2)
        run_tool(tool, ["--learned", model, "--problem", "12", "--html", page, "--out", os.path.join(tmp, "c5")], 2)
        # A verify_learned report's counterexample: its problem zero-padded to the report's shape; a file that is
        # not a report, or a report without a counterexample, is refused.
        report = os.path.join(src, "bench", "results", "length-wall", "verify", "far-mask-s2-ta1010.json")
        cex = os.path.join(tmp, "cex.html")
        run_tool(tool, ["--learned", model, "--counterexample", report, "--samples", "2", "--html", cex, "--out",
                        os.path.join(tmp, "c6"), "--quiet"], 0)
        want = json.load(open(report))["counterexample"]["problem"]
        if [o.zfill(10) for o in page_data(open(cex).read())["problem"].split("+")] != want.split("+"):
            fail(f"the counterexample page shows {page_data(open(cex).read())['problem']}, the report {want}")
        run_tool(tool, ["--learned", model, "--counterexample", os.path.join(src, "README.md"), "--html", cex], 2)
        run_tool(tool, ["--learned", model, "--counterexample", report.replace("-s2-", "-s1-"), "--html", cex], 2)
        run_tool(tool, ["--learned", model, "--counterexample", report, "--problem", "1+2", "--html", cex], 2)

        html = open(page, encoding="utf-8").read()
        size = os.path.getsize(page)
        if not 10_000 < size < 2_000_000:
            fail(f"the TA(10, 10) page is {size} bytes (wanted below 2 MB)")
        for needle in ("http://", "https://", "src=", "href=", "@import", "url("):
            if needle in html:
                fail(f"the page refers to something outside it: '{needle}'")
        D = page_data(html)
        l = D["l"]
        if D["N"] != (2 * M + 1) * (l + 1) or len(D["tokens"]) != D["N"] or len(D["models"]) != 2:
            fail(f"page data: N {D['N']}, {len(D['tokens'])} tokens, {len(D['models'])} models")

        opts = Options()
        opts.binary_location = browser
        for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1500,1100",
                  "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND"):  # offline: no request can succeed
            opts.add_argument(a)
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        drv = webdriver.Chrome(service=Service(driver_bin), options=opts)
        try:
            drv.get("file://" + page)
            errors = [e for e in drv.get_log("browser") if e.get("level") == "SEVERE"]
            if errors:
                fail(f"console errors: {errors}")
            fetched = drv.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
            if fetched:
                fail(f"the page fetched {fetched}")
            panels = drv.find_elements(By.CSS_SELECTOR, ".panel")
            if len(panels) != 2:
                fail(f"{len(panels)} model panels")
            learned, constructed = panels

            # The constructed digit_sum head at the query that predicts B_2's 3rd digit (the cell of B_2[t=2]).
            k, t = 2, 3
            query = layout_index(l, M, "B", k, t - 1)
            want = {layout_index(l, M, "A", k, t), layout_index(l, M, "B", k - 1, t)}
            head = [b for b in constructed.find_elements(By.CSS_SELECTOR, "button.head") if "digit_sum" in b.text]
            if len(head) != 1:
                fail("no digit_sum head button in the constructed panel")
            head[0].click()
            constructed.find_element(By.CSS_SELECTOR, f'.cell[data-idx="{query}"]').click()

            def keys(panel):
                return [(int(li.get_attribute("data-key")), float(li.get_attribute("data-weight")))
                        for li in panel.find_elements(By.CSS_SELECTOR, ".topkeys li[data-key]")]

            got = {key for key, w in keys(constructed) if key != 0 and w > 0.25}
            if got != want:
                fail(f"constructed digit_sum keys of query {query}: {sorted(got)}, wanted {sorted(want)}")
            # The same query in the learned panel, and its own digit_sum head (compare_attention's matching):
            # its two heaviest keys besides BOS are the construction's.
            q_cells = learned.find_elements(By.CSS_SELECTOR, ".cell.query")
            if [c.get_attribute("data-idx") for c in q_cells] != [str(query)]:
                fail("the learned panel does not show the selected query")
            lhead = [b for b in learned.find_elements(By.CSS_SELECTOR, "button.head") if "(digit_sum)" in b.text]
            if len(lhead) != 1:
                fail("no learned head plays digit_sum")
            lhead[0].click()
            top = [key for key, w in keys(learned) if key != 0][:2]
            if set(top) != want:
                fail(f"the learned digit_sum head's top keys {top}, the construction's {sorted(want)}")

            # A prediction row selects its query; a hover shows the position IDs.
            j = layout_index(l, M, "B", 1, 4)
            drv.find_element(By.CSS_SELECTOR, f'#predictions tr[data-index="{j}"]').click()
            if drv.execute_script("return window.manyaddPage.state.query") != j:
                fail("a click on a prediction row does not select its query")
            cell = constructed.find_element(By.CSS_SELECTOR, f'.cell[data-idx="{j}"]')
            ActionChains(drv).move_to_element(cell).perform()
            tip = drv.find_element(By.ID, "tip").text
            if f"p1 {D['pos1'][j]}" not in tip or f"p2 {D['pos2'][j]}" not in tip:
                fail(f"hover text '{tip}' lacks the position IDs {D['pos1'][j]}, {D['pos2'][j]}")

            shot = os.path.join(tmp, "page.png")
            drv.save_screenshot(shot)
            w, h = png_size(shot)
            if w < 800 or h < 600 or os.path.getsize(shot) < 20_000:
                fail(f"screenshot {w} x {h}, {os.path.getsize(shot)} bytes")
            errors = [e for e in drv.get_log("browser") if e.get("level") == "SEVERE"]
            if errors:
                fail(f"console errors after the clicks: {errors}")
        finally:
            drv.quit()
    print(f"test_attention_page: passed (page {size} bytes, screenshot {w} x {h})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
