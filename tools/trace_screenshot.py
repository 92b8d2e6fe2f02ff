#!/usr/bin/env python3
"""Screenshot of a handgrad profile --trace file in Chromium's own trace viewer (the
DevTools Performance panel), for docs/profiling.md. Drives headless Chromium over the
DevTools protocol on a pipe, so it needs nothing but Debian's chromium package:

    apt-get install chromium
    python3 tools/trace_screenshot.py trace.json docs/img/profile_trace.png [--step N] [--crop H]

--step N shows only step N of the trace (its slices are copied to a temporary file);
--crop H keeps the top H pixels.

"""
import argparse
import base64
import json
import os
import select
import subprocess
import time

FIND = """function find(root, pred) {
  for (const el of root.querySelectorAll('*')) {
    if (pred(el)) return el;
    if (el.shadowRoot) { const r = find(el.shadowRoot, pred); if (r) return r; }
  }
  return null;
}"""


class Chromium:
    """Headless Chromium with the DevTools protocol on fds 3 (in) and 4 (out)."""

    def __init__(self, width, height):
        r1, self.w = os.pipe()
        self.r, w2 = os.pipe()

        def fds():
            os.dup2(r1, 3)
            os.dup2(w2, 4)

        self.proc = subprocess.Popen(
            ["chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             f"--window-size={width},{height}", "about:blank"],
            pass_fds=(3, 4), preexec_fn=fds, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(r1)
        os.close(w2)
        self.buf, self.next_id, self.events, self.session = b"", 0, [], None

    def _read(self):
        while b"\0" not in self.buf:
            self.buf += os.read(self.r, 1 << 20)
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def send(self, method, **params):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params}
        if self.session:
            msg["sessionId"] = self.session
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        while True:
            m = self._read()
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def wait_event(self, name, timeout):
        end = time.time() + timeout
        while time.time() < end:
            for e in self.events:
                if e.get("method") == name:
                    self.events.remove(e)
                    return e
            if b"\0" in self.buf or select.select([self.r], [], [], 0.2)[0]:
                self.events.append(self._read())
        raise RuntimeError(f"no {name} within {timeout} s")

    def js(self, body):
        res = self.send("Runtime.evaluate", expression=f"(function(){{{FIND}{body}}})()", returnByValue=True)
        return res.get("result", {}).get("value")

    def click_at(self, x, y):
        for typ in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=typ, x=x, y=y, clickCount=1,
                      button="none" if typ == "mouseMoved" else "left")

    def click(self, predicate):
        """Clicks the centre of the first element (shadow roots included) matching a JS predicate."""
        rect = self.js(f"const e = find(document, e => {predicate}); if (!e) return null;"
                       "const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2];")
        if not rect:
            raise RuntimeError(f"nothing matches {predicate}")
        self.click_at(*rect)

    def key(self, key, code, keycode):
        for typ in ("keyDown", "keyUp"):
            self.send("Input.dispatchKeyEvent", type=typ, key=key, code=code, windowsVirtualKeyCode=keycode)

    def close(self):
        self.proc.kill()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("png")
    ap.add_argument("--width", type=int, default=1600)
    ap.add_argument("--height", type=int, default=900)
    ap.add_argument("--step", type=int)
    ap.add_argument("--crop", type=int, help="keep only the top CROP pixels")
    args = ap.parse_args()
    trace = os.path.abspath(args.trace)
    if args.step is not None:
        with open(trace) as f:
            t = json.load(f)
        t["traceEvents"] = [e for e in t["traceEvents"] if e["ph"] == "M" or e["args"].get("step") == args.step]
        trace = os.path.abspath(args.png + ".trace.json")
        with open(trace, "w") as f:
            json.dump(t, f)

    c = Chromium(args.width, args.height)
    try:
        target = c.send("Target.createTarget", url="about:blank")["targetId"]
        c.session = c.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        c.send("Page.enable")
        c.send("Page.navigate", url="devtools://devtools/bundled/devtools_app.html")
        time.sleep(5)
        c.click("e.getAttribute && e.getAttribute('role') == 'tab' && e.textContent.trim() == 'Performance'")
        time.sleep(3)
        c.send("Page.setInterceptFileChooserDialog", enabled=True)
        c.click("e.tagName == 'BUTTON' && /^Load trace/.test(e.getAttribute('aria-label') || '')")
        chooser = c.wait_event("Page.fileChooserOpened", 20)
        c.send("DOM.enable")
        c.send("DOM.setFileInputFiles", files=[trace],
               backendNodeId=chooser["params"]["backendNodeId"])
        time.sleep(10)
        # the first-run shortcuts card and the annotations sidebar take room
        c.js("const b = find(document, e => e.tagName == 'BUTTON' && e.getAttribute('aria-label') == 'Close'"
             " && e.closest('[role=dialog], .keyboard-shortcuts, devtools-shortcut-dialog') != null);"
             " if (b) b.click(); return 1;")
        c.js("const b = find(document, e => e.tagName == 'BUTTON' && /^Hide sidebar/.test(e.getAttribute('aria-label') || ''));"
             " if (b) b.click(); return 1;")
        time.sleep(2)
        # expand the process's track: its header is the first row of the main flame chart
        rect = c.js("const cs = []; (function walk(r) { for (const e of r.querySelectorAll('canvas')) cs.push(e);"
                    " for (const e of r.querySelectorAll('*')) if (e.shadowRoot) walk(e.shadowRoot); })(document);"
                    " cs.sort((a, b) => b.getBoundingClientRect().height - a.getBoundingClientRect().height);"
                    " const r = cs[0].getBoundingClientRect(); return [r.x, r.y];")
        c.click_at(rect[0] + 60, rect[1] + 28)
        time.sleep(2)
        c.click_at(rect[0] + 60, rect[1] + 45)  # and the thread's track under it
        c.send("Input.dispatchMouseEvent", type="mouseMoved", x=args.width - 5, y=args.height - 5)  # no tooltip
        time.sleep(3)
        clip = {"x": 0, "y": 0, "width": args.width, "height": args.crop or args.height, "scale": 1}
        png = c.send("Page.captureScreenshot", format="png", clip=clip)["data"]
        with open(args.png, "wb") as f:
            f.write(base64.b64decode(png))
    finally:
        c.close()
        if args.step is not None:
            os.remove(trace)


if __name__ == "__main__":
    main()
