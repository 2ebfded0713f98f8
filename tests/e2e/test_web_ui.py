"""The web page of `hearth serve` in a real browser: headless Chromium (Debian's `chromium`,
installed by scripts/test.sh) driven over the Chrome DevTools protocol. The page loads, a chat
streams its answer in and shows its stats line, the live view's counters move while another
client streams, model output holding <script> stays text, the API-key flow, and --no-ui.
Screenshots go to tests/e2e/artifacts/web_ui/ (git-ignored)."""
import base64
import itertools
import json
import os
import pathlib
import re
import shutil
import subprocess
import tempfile
import threading
import time

import pytest
import requests

from serve_util import Server, http_get, wait_for

ARTIFACTS = pathlib.Path(os.environ.get("HEARTH_TEST_ARTIFACTS", pathlib.Path(__file__).parent / "artifacts")) / "web_ui"
KEY = "page-test-key"


def chromium_path():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


class Browser:
    """One headless Chromium with one page, over the DevTools protocol (a websocket)."""

    def __init__(self, tmp):
        from websockets.sync.client import connect

        self.profile = pathlib.Path(tempfile.mkdtemp(prefix="chromium-", dir=tmp))
        self.proc = subprocess.Popen(
            [chromium_path(), "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
             "--remote-debugging-port=0", "--remote-allow-origins=*", f"--user-data-dir={self.profile}",
             "--window-size=1400,1000", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        port_file = self.profile / "DevToolsActivePort"
        assert wait_for(lambda: port_file.exists() and port_file.read_text().count("\n") >= 1, 30), \
            "chromium did not open its DevTools port"
        port = int(port_file.read_text().split("\n")[0])
        targets = wait_for(lambda: [t for t in requests.get(f"http://127.0.0.1:{port}/json/list", timeout=5).json()
                                    if t["type"] == "page"], 10)
        self.ws = connect(targets[0]["webSocketDebuggerUrl"], max_size=None, open_timeout=10)
        self.ids = itertools.count(1)
        self.events = []
        self.call("Runtime.enable")
        self.call("Log.enable")
        self.call("Page.enable")

    def call(self, method, timeout=30, **params):
        i = next(self.ids)
        self.ws.send(json.dumps({"id": i, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            msg = json.loads(self.ws.recv(timeout=max(0.01, deadline - time.monotonic())))
            if msg.get("id") == i:
                assert "error" not in msg, f"{method}: {msg['error']}"
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def js(self, expr, timeout=30):
        """The value of a JavaScript expression (awaited when it is a promise)."""
        r = self.call("Runtime.evaluate", timeout=timeout, expression=expr, awaitPromise=True, returnByValue=True)
        assert "exceptionDetails" not in r, f"{expr!r} threw: {r['exceptionDetails']}"
        return r["result"].get("value")

    def wait(self, expr, timeout=20, what=None):
        """Polls a JavaScript expression until truthy; returns its value."""
        v = wait_for(lambda: self.js(expr), timeout, interval=0.05)
        assert v, f"timed out waiting for {what or expr}"
        return v

    def open(self, url):
        self.call("Runtime.evaluate", expression="0")  # (events of the page before: dropped)
        self.events = []
        self.call("Page.navigate", url=url)
        self.wait("document.readyState === 'complete' && typeof Hearth === 'object'", what=f"{url} to load")

    def type(self, selector, text):
        self.js(f"document.querySelector({json.dumps(selector)}).focus()")
        self.call("Input.insertText", text=text)

    def press_enter(self):
        for kind in ("keyDown", "keyUp"):
            self.call("Input.dispatchKeyEvent", type=kind, key="Enter", code="Enter", windowsVirtualKeyCode=13)

    def click(self, selector):
        self.js(f"document.querySelector({json.dumps(selector)}).click()")

    def text(self, selector):
        return self.js(f"(document.querySelector({json.dumps(selector)}) || {{}}).textContent || ''")

    def screenshot(self, name):
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path = ARTIFACTS / f"{name}.png"
        path.write_bytes(base64.b64decode(data))
        return path

    def page_errors(self):
        """Uncaught exceptions, console errors and CSP reports seen so far."""
        self.call("Runtime.evaluate", expression="0")  # drains the events queued before it
        out = []
        for e in self.events:
            if e["method"] == "Runtime.exceptionThrown":
                out.append(e["params"]["exceptionDetails"].get("exception", {}).get("description") or
                           e["params"]["exceptionDetails"].get("text"))
            elif e["method"] == "Runtime.consoleAPICalled" and e["params"]["type"] == "error":
                out.append(" ".join(str(a.get("value", a.get("description"))) for a in e["params"]["args"]))
            elif e["method"] == "Log.entryAdded" and e["params"]["entry"]["level"] == "error":
                entry = e["params"]["entry"]
                out.append(entry["text"] + (" " + entry["url"] if entry.get("url") else ""))
        return out

    def close(self):
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            shutil.rmtree(self.profile, ignore_errors=True)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if chromium_path() is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium; scripts/test.sh installs it)")
    b = Browser(tmp_path_factory.mktemp("browser"))
    yield b
    b.close()


@pytest.fixture(scope="module")
def server(hearth_bin, default_model):
    s = Server(hearth_bin, default_model, "--max-seqs", "4")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def keyed(hearth_bin, default_model):
    s = Server(hearth_bin, default_model, "--api-key", KEY)
    yield s
    s.stop()


def send_chat(browser, text, max_tokens=40, temperature=0, extra=""):
    browser.js(f"""(() => {{
        document.getElementById('max-tokens').value = '{max_tokens}';
        document.getElementById('temperature').value = '{temperature}';
        document.getElementById('extra').value = {json.dumps(extra)};
        const n = document.querySelectorAll('#messages .msg.assistant').length;
        window.__answers = n;
        // Every length the answer's text had as it rendered (the stream, seen from the page).
        window.__lengths = [];
        new MutationObserver(() => {{
            const a = document.querySelectorAll('#messages .msg.assistant .content')[n];
            if (a) window.__lengths.push(a.textContent.length);
        }}).observe(document.getElementById('messages'), {{childList: true, subtree: true, characterData: true}});
    }})()""")
    browser.type("#prompt", text)
    browser.press_enter()
    browser.wait("document.querySelectorAll('#messages .msg.assistant').length > window.__answers",
                 what="the answer's box")
    # Done: the stats line is written when the stream ends.
    browser.wait("(() => { const a = [...document.querySelectorAll('#messages .msg.assistant')].pop();"
                 " return a.querySelector('.stats').textContent.length > 0 &&"
                 " document.getElementById('send').disabled === false; })()", timeout=60, what="the answer's end")
    return browser.js("(() => { const a = [...document.querySelectorAll('#messages .msg.assistant')].pop();"
                      " return {content: a.querySelector('.content').textContent,"
                      " stats: a.querySelector('.stats').textContent,"
                      " error: (a.querySelector('.error') || {}).textContent || '', lengths: window.__lengths}; })()")


STATS_RE = re.compile(r"(\d+) prompt tokens \((\d+) cached\) · (\d+) generated · TTFT (\d+) ms · ([\d.]+) tok/s")


def test_chat_streams_and_shows_its_stats(browser, server):
    browser.open(server.url + "/")
    browser.wait("document.getElementById('model').options.length === 1", what="the model list")
    assert browser.js("document.getElementById('model').value") == "SmolLM2-135M-Instruct.Q4_1"
    # A text model: no image upload.
    assert browser.js("document.getElementById('image-label').hidden") is True

    a = send_chat(browser, "Write a short poem about the sea.", max_tokens=48)
    assert not a["error"], a
    assert a["content"].strip(), a
    # Streamed: the text grew over several renders before it was whole.
    partial = sorted({n for n in a["lengths"] if 0 < n < len(a["content"])})
    assert len(partial) >= 2, f"the answer did not arrive in pieces: {a['lengths']}"
    m = STATS_RE.search(a["stats"])
    assert m, a["stats"]
    assert int(m.group(1)) > 0 and int(m.group(3)) > 0 and float(m.group(5)) > 0
    browser.screenshot("chat")

    # The second turn's prompt starts with the first: the prefix cache serves part of it.
    b = send_chat(browser, "Now make it rhyme.", max_tokens=24)
    m2 = STATS_RE.search(b["stats"])
    assert m2, b["stats"]
    assert int(m2.group(2)) > 0, f"no cached prompt tokens on the second turn: {b['stats']}"

    # Copy as JSON: the conversation with each answer's stats.
    browser.click("#copy")
    exported = json.loads(browser.wait("document.getElementById('export').value"))
    assert [x["role"] for x in exported["messages"]] == ["user", "assistant", "user", "assistant"]
    # (the page shows the answer's line breaks as <br>, which have no text)
    assert re.sub(r"\s", "", exported["messages"][1]["content"]) == re.sub(r"\s", "", a["content"])
    assert exported["messages"][3]["stats"]["usage"]["prompt_tokens_details"]["cached_tokens"] == int(m2.group(2))
    assert exported["max_tokens"] == 24 and exported["temperature"] == 0
    browser.click("#clear")
    assert browser.js("document.querySelectorAll('#messages .msg').length") == 0
    assert browser.page_errors() == []


def test_live_view_moves_while_another_client_streams(browser, server):
    browser.open(server.url + "/")
    browser.wait("document.getElementById('stat-kv-free').textContent !== '–'", what="the first status")
    sampled_before = int(browser.text("#stat-sampled").replace(",", ""))
    stop = threading.Event()
    errors = []

    def client():  # the other client: streams chats back to back until told to stop
        body = {"messages": [{"role": "user", "content": "Count from one to one hundred in words."}],
                "max_tokens": 200, "temperature": 0, "stream": True}
        while not stop.is_set():
            try:
                with requests.post(server.url + "/v1/chat/completions", json=body, stream=True, timeout=60) as r:
                    for _ in r.iter_lines():
                        if stop.is_set():
                            break
            except requests.RequestException as e:
                errors.append(e)
                return

    t = threading.Thread(target=client, daemon=True)
    t.start()
    try:
        seen = {"running": False, "rate": False}

        def moved():
            if browser.text("#stat-running") != "0" and browser.text("#stat-running") != "–":
                seen["running"] = True
            rate = browser.text("#stat-out-rate")
            if rate not in ("–", "") and float(rate) > 0:
                seen["rate"] = True
            return all(seen.values())

        assert wait_for(moved, 20, interval=0.2), f"the live view did not move: {seen}"
        sampled = int(browser.text("#stat-sampled").replace(",", ""))
        assert sampled > sampled_before
        # The chart of tokens/s has drawn something (pixels that are not background).
        assert browser.js("(() => { const c = document.getElementById('chart-tokens');"
                          " const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
                          " let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n; })()") > 50
        browser.screenshot("live")
    finally:
        stop.set()
        t.join(timeout=30)
    assert not errors, errors
    assert browser.page_errors() == []


def test_model_output_with_script_stays_text(browser, server):
    # The grammar of response_format makes the model write exactly this string (as JSON).
    payload = '<script>window.__pwned=1</script> **bold** <img src=x onerror="window.__pwned=2">'
    extra = json.dumps({"response_format": {"type": "json_schema", "json_schema": {
        "name": "html", "schema": {"type": "string", "enum": [payload]}}}})
    browser.open(server.url + "/ui")
    browser.wait("document.getElementById('model').options.length === 1", what="the model list")
    a = send_chat(browser, "Say something.", max_tokens=120, extra=extra)
    assert not a["error"], a
    assert "<script>window.__pwned=1</script>" in a["content"], a["content"]
    assert browser.js("document.querySelectorAll('#messages script, #messages img, #messages [onerror]').length") == 0
    assert browser.js("typeof window.__pwned") == "undefined"
    # The markdown around it was rendered (as elements this page made), the HTML not.
    assert browser.js("[...document.querySelectorAll('#messages .content strong')].map(e => e.textContent)") == ["bold"]
    browser.screenshot("script_as_text")
    assert browser.page_errors() == []


def test_tool_calls_show_as_calls(browser, server):
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    extra = json.dumps({"tools": tools, "tool_choice": "required"})  # a grammar makes it a call
    browser.open(server.url + "/")
    browser.wait("document.getElementById('model').options.length === 1", what="the model list")
    a = send_chat(browser, "What is the weather in Paris?", max_tokens=60, extra=extra)
    assert not a["error"], a
    assert "finish: tool_calls" in a["stats"], a["stats"]
    call = browser.js("(() => { const c = document.querySelector('#messages .tool-call');"
                      " return c && {name: c.querySelector('.name').textContent, args: c.querySelector('code').textContent}; })()")
    assert call and call["name"] == "tool call: get_weather", call
    assert isinstance(json.loads(call["args"])["city"], str)
    exported = json.loads(browser.js("HearthChat.exportJson()"))
    assert exported["messages"][1]["tool_calls"][0]["function"]["name"] == "get_weather"
    browser.screenshot("tool_call")
    assert browser.page_errors() == []


def test_markdown_renderer_makes_only_its_own_elements(browser, server):
    browser.open(server.url + "/")
    crafted = ("# Title <b>x</b>\n\nSome *em* and **strong** and `<i>code</i>`.\n\n"
               "- one <script>alert(1)</script>\n- [ok](https://example.com/a?b=1)\n- [bad](javascript:alert(1))\n\n"
               "```html\n<script>window.__pwned = 3</script>\n```\n\n> quoted <img src=x onerror=alert(1)>\n\n"
               "1. first\n2. second")
    r = browser.js(f"""(() => {{
        const d = document.createElement('div');
        d.appendChild(HearthMarkdown.render({json.dumps(crafted)}));
        document.body.appendChild(d);
        const tags = [...d.querySelectorAll('*')].map(e => e.tagName.toLowerCase());
        const links = [...d.querySelectorAll('a')].map(a => a.getAttribute('href'));
        const attrs = [...d.querySelectorAll('*')].flatMap(e => [...e.attributes].map(a => a.name));
        const out = {{tags: [...new Set(tags)].sort(), links, attrs: [...new Set(attrs)].sort(),
                      code: d.querySelector('pre code').textContent, h: d.querySelector('h2').textContent,
                      items: [...d.querySelectorAll('ul > li')].map(li => li.textContent)}};
        d.remove();
        return out;
    }})()""")
    assert r["tags"] == sorted(["h2", "p", "em", "strong", "code", "ul", "li", "a", "pre", "blockquote", "ol"]), r
    assert r["links"] == ["https://example.com/a?b=1"], r  # javascript: stays text
    assert r["attrs"] == ["data-lang", "href", "rel", "target"], r
    assert r["code"] == "<script>window.__pwned = 3</script>"
    assert r["h"] == "Title <b>x</b>"
    assert r["items"] == ["one <script>alert(1)</script>", "ok", "[bad](javascript:alert(1))"]
    assert browser.js("typeof window.__pwned") == "undefined"


def test_stop_cancels_the_request(browser, server):
    browser.open(server.url + "/")
    browser.wait("document.getElementById('model').options.length === 1", what="the model list")
    cancelled = requests.get(server.url + "/v1/status", timeout=10).json()["requests"]["finished"]["cancelled"]
    browser.js("document.getElementById('max-tokens').value = '2000'; document.getElementById('extra').value = ''")
    browser.type("#prompt", "Write a very long story about a lighthouse keeper.")
    browser.press_enter()
    browser.wait("(() => { const a = [...document.querySelectorAll('#messages .msg.assistant')].pop();"
                 " return a && a.querySelector('.content').textContent.length > 20; })()", what="some of the answer")
    browser.click("#stop")
    browser.wait("[...document.querySelectorAll('#messages .msg.assistant')].pop()"
                 ".querySelector('.stats').textContent.includes('finish: stopped')", what="the stopped answer")
    assert browser.js("document.getElementById('send').disabled") is False
    # The server let the sequence go (the client went away mid-stream).
    assert wait_for(lambda: requests.get(server.url + "/v1/status", timeout=10).json()
                    ["requests"]["finished"]["cancelled"] > cancelled, 10), "the request was not cancelled"


def test_api_key_is_asked_once_and_sent(browser, keyed):
    # The shell is static and served to anyone; every data route needs the key.
    assert http_get(keyed.url + "/").status_code == 200
    assert http_get(keyed.url + "/ui/app.js").status_code == 200
    for path in ("/v1/status", "/v1/models", "/metrics"):
        assert http_get(keyed.url + path).status_code == 401, path
    browser.open(keyed.url + "/")
    browser.js("sessionStorage.clear(); localStorage.clear()")
    browser.open(keyed.url + "/")
    browser.wait("document.getElementById('key-dialog').open", what="the key dialog")
    assert browser.text("#stat-kv-free") == "–"  # nothing shown without the key
    browser.screenshot("api_key_dialog")
    browser.type("#key-input", "wrong-key")
    browser.click("#key-save")
    browser.wait("document.getElementById('key-dialog').open &&"
                 " document.getElementById('key-reason').textContent.includes('refused')", what="the key refused")
    browser.js("document.getElementById('key-input').value = ''")
    browser.type("#key-input", KEY)
    browser.click("#key-save")
    browser.wait("document.getElementById('stat-kv-free').textContent !== '–'", what="the status with the key")
    browser.wait("document.getElementById('model').options.length === 1", what="the model list with the key")
    assert browser.js("document.getElementById('key-dialog').open") is False
    assert browser.js("sessionStorage.getItem('hearth.apiKey')") == KEY
    a = send_chat(browser, "Hello!", max_tokens=8)
    assert not a["error"] and STATS_RE.search(a["stats"]), a
    # Asked once: a reload in the same tab keeps the key.
    browser.open(keyed.url + "/")
    browser.wait("document.getElementById('stat-kv-free').textContent !== '–'", what="the status after a reload")
    assert browser.js("document.getElementById('key-dialog').open") is False
    browser.js("sessionStorage.clear()")
    # 401s seen by the page are console errors of the network layer, not of the page's code.
    assert [e for e in browser.page_errors() if "401" not in e] == []


def test_no_ui_answers_404(hearth_bin, default_model):
    s = Server(hearth_bin, default_model, "--no-ui")
    try:
        for path in ("/", "/ui", "/ui/", "/ui/app.js", "/ui/index.html"):
            r = http_get(s.url + path)
            assert r.status_code == 404, path
            assert r.json()["error"]["message"].startswith("no route for GET"), r.text
        assert http_get(s.url + "/v1/status").status_code == 200  # the API stays
    finally:
        s.stop()


def test_page_files_are_served_with_their_types(server):
    page = http_get(server.url + "/")
    assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["Content-Security-Policy"]
    assert http_get(server.url + "/ui").text == page.text
    for name in re.findall(r'(?:src|href)="/ui/([\w.-]+)"', page.text):
        r = http_get(server.url + "/ui/" + name)
        assert r.status_code == 200, name
        assert r.headers["Content-Type"].startswith("text/javascript" if name.endswith(".js") else "text/css"), name
    # Nothing from elsewhere: no http(s) URL a browser would fetch.
    assert not re.search(r'(?:src|href)="(?:https?:)?//', page.text)
    assert http_get(server.url + "/ui/nope.js").status_code == 404
    assert http_get(server.url + "/ui/../CMakeLists.txt").status_code == 404


@pytest.fixture(scope="module")
def two_models(hearth_bin, default_model, shared_dir, tmp_path_factory):
    """A text model and the tiny random vision model (its answers are noise), both loaded."""
    from vision_util import make_tiny_vision_model

    vision = make_tiny_vision_model(tmp_path_factory.mktemp("vision") / "hf", shared_dir)
    s = Server(hearth_bin, f"smol={default_model}", "--model", f"vis={vision}", "--pin", "smol", "--pin", "vis",
               "--ctx", "4096")
    yield s
    s.stop()


def test_several_models_and_an_image(browser, two_models, tmp_path):
    from vision_util import png_bytes

    browser.open(two_models.url + "/")
    browser.wait("document.getElementById('model').options.length === 2", what="both models in the list")
    browser.wait("document.querySelectorAll('#models tbody tr').length === 2", what="both models in the live view")
    rows = browser.js("[...document.querySelectorAll('#models tbody tr')].map(r => [...r.cells].map(c => c.textContent))")
    assert [r[0] for r in rows] == ["smol", "vis"] and [r[1] for r in rows] == ["loaded", "loaded"], rows
    assert rows[0][2] == "llama" and rows[0][4] == "Q4_1", rows

    def pick(name):
        browser.js(f"(() => {{ const s = document.getElementById('model'); s.value = {json.dumps(name)};"
                   " s.dispatchEvent(new Event('change')); })()")

    pick("smol")
    assert browser.js("document.getElementById('image-label').hidden") is True
    pick("vis")
    assert browser.js("document.getElementById('image-label').hidden") is False
    png = tmp_path / "picture.png"
    png.write_bytes(png_bytes(64, 48))
    root = browser.call("DOM.getDocument")["root"]["nodeId"]
    node = browser.call("DOM.querySelector", nodeId=root, selector="#image")["nodeId"]
    browser.call("DOM.setFileInputFiles", files=[str(png)], nodeId=node)
    browser.wait("document.querySelectorAll('#attachments img').length === 1", what="the attached image")
    a = send_chat(browser, "What is in the picture?", max_tokens=6)
    assert not a["error"], a
    m = STATS_RE.search(a["stats"])
    assert m, a["stats"]
    # The image went with the message: its tokens are in the prompt, and the message shows it.
    text_only = requests.post(two_models.url + "/tokenize", json={
        "model": "vis", "messages": [{"role": "user", "content": "What is in the picture?"}]}).json()["tokens"]
    assert int(m.group(1)) > len(text_only), (a["stats"], len(text_only))
    assert browser.js("document.querySelector('#messages .msg.user img').src.startsWith('data:image/png;base64,')")
    assert browser.js("document.querySelectorAll('#attachments img').length") == 0
    # This model's template thinks first: its reasoning is in a folded block, apart from the content.
    assert browser.js("(() => { const d = [...document.querySelectorAll('#messages .reasoning')].pop();"
                      " return !!d && !d.open && d.querySelector('.md').textContent.length > 0; })()"), \
        "no folded reasoning block"
    browser.screenshot("two_models_image")
    # Thinking off: the template is told so (enable_thinking false), and no reasoning comes.
    browser.js("document.getElementById('thinking').value = 'off'")
    a = send_chat(browser, "And now?", max_tokens=6)
    assert not a["error"], a
    assert browser.js("[...document.querySelectorAll('#messages .msg.assistant')].pop()"
                      ".querySelector('.reasoning') === null")
    assert browser.page_errors() == []
