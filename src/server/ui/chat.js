// The chat panel: POST /v1/chat/completions with "stream": true, the answer read from the
// SSE stream as it comes (content rendered as safe markdown, reasoning in a folded block,
// tool calls as such), then a stats line from the final chunks' usage and timings.
"use strict";

const HearthChat = (() => {
  const $ = (id) => document.getElementById(id);
  let models = [];        // /v1/models entries (aliases left out)
  let conversation = [];  // {role, content, reasoning?, tool_calls?, stats?}
  let pending = [];       // images (data: URLs) for the next message
  let controller = null;  // the request streaming now

  async function loadModels() {
    const res = await Hearth.api("/v1/models");
    if (!res.ok) return;
    const j = await res.json();
    models = (j.data || []).filter((m) => !m.alias_of);
    const sel = $("model");
    const was = sel.value;
    sel.textContent = "";
    for (const m of models) {
      const o = document.createElement("option");
      o.value = m.id;
      o.textContent = m.status && m.status !== "loaded" ? `${m.id} (${m.status})` : m.id;
      sel.appendChild(o);
    }
    if (models.some((m) => m.id === was)) sel.value = was;
    visionControls();
  }

  function hasVision() {
    const m = models.find((x) => x.id === $("model").value);
    return !!(m && Array.isArray(m.capabilities) && m.capabilities.includes("vision"));
  }

  function visionControls() {
    $("image-label").hidden = !hasVision();
    if (!hasVision()) setPending([]);
  }

  function setPending(list) {
    pending = list;
    const box = $("attachments");
    box.textContent = "";
    for (const url of pending) {
      const img = document.createElement("img");
      img.src = url;
      img.alt = "attached image";
      box.appendChild(img);
    }
  }

  function readImages(files) {
    return Promise.all([...files].map((f) => new Promise((ok, bad) => {
      const r = new FileReader();
      r.onload = () => ok(r.result);
      r.onerror = () => bad(r.error);
      r.readAsDataURL(f);
    })));
  }

  // One message's box: who, then a body the caller fills.
  function box(role) {
    const div = document.createElement("div");
    div.className = "msg " + role;
    const who = document.createElement("div");
    who.className = "who";
    who.textContent = role;
    div.appendChild(who);
    $("messages").appendChild(div);
    return div;
  }

  function showUser(msg) {
    const div = box("user");
    const body = document.createElement("div");
    body.className = "md";
    body.appendChild(HearthMarkdown.render(msg.text));
    div.appendChild(body);
    for (const url of msg.images || []) {
      const img = document.createElement("img");
      img.src = url;
      img.alt = "image sent";
      div.appendChild(img);
    }
    scroll();
  }

  function scroll() {
    const m = $("messages");
    m.scrollTop = m.scrollHeight;
  }

  // The assistant's box as it streams: parts created as the first of each arrives.
  class Answer {
    constructor() {
      this.div = box("assistant");
      this.msg = { role: "assistant", content: "", reasoning: "", tool_calls: [] };
      this.reasoningBox = null;
      this.content = document.createElement("div");
      this.content.className = "md content";
      this.div.appendChild(this.content);
      this.tools = null;
      this.stats = document.createElement("div");
      this.stats.className = "stats";
      this.div.appendChild(this.stats);
      this.dirty = false;
    }
    reasoning(text) {
      if (!this.reasoningBox) {
        const d = document.createElement("details");
        d.className = "reasoning";
        const s = document.createElement("summary");
        s.textContent = "Reasoning";
        d.appendChild(s);
        this.reasoningText = document.createElement("div");
        this.reasoningText.className = "md";
        d.appendChild(this.reasoningText);
        this.div.insertBefore(d, this.content);
        this.reasoningBox = d;
      }
      this.msg.reasoning += text;
      this.later();
    }
    text(t) {
      this.msg.content += t;
      this.later();
    }
    toolCall(delta) {
      const i = delta.index || 0;
      let c = this.msg.tool_calls[i];
      if (!c) {
        c = this.msg.tool_calls[i] = { id: delta.id || "", type: "function", function: { name: "", arguments: "" } };
      }
      if (delta.id) c.id = delta.id;
      if (delta.function) {
        if (delta.function.name) c.function.name += delta.function.name;
        if (delta.function.arguments) c.function.arguments += delta.function.arguments;
      }
      this.later();
    }
    // Renders at most once a frame, however fast the deltas come.
    later() {
      if (this.dirty) return;
      this.dirty = true;
      requestAnimationFrame(() => this.render());
    }
    render() {
      this.dirty = false;
      if (this.reasoningBox) {
        this.reasoningText.textContent = "";
        this.reasoningText.appendChild(HearthMarkdown.render(this.msg.reasoning));
        this.reasoningBox.querySelector("summary").textContent =
          `Reasoning (${this.msg.reasoning.length} characters)`;
      }
      this.content.textContent = "";
      this.content.appendChild(HearthMarkdown.render(this.msg.content));
      const calls = this.msg.tool_calls.filter(Boolean);
      if (calls.length) {
        if (!this.tools) {
          this.tools = document.createElement("div");
          this.tools.className = "tool-calls";
          this.div.insertBefore(this.tools, this.stats);
        }
        this.tools.textContent = "";
        for (const c of calls) {
          const d = document.createElement("div");
          d.className = "tool-call";
          const name = document.createElement("span");
          name.className = "name";
          name.textContent = "tool call: " + c.function.name;
          d.appendChild(name);
          const pre = document.createElement("pre");
          const code = document.createElement("code");
          let args = c.function.arguments;
          try { args = JSON.stringify(JSON.parse(args), null, 2); } catch (e) { /* still streaming */ }
          code.textContent = args;
          pre.appendChild(code);
          d.appendChild(pre);
          this.tools.appendChild(d);
        }
      }
      scroll();
    }
    error(text) {
      const e = document.createElement("div");
      e.className = "error";
      e.textContent = text;
      this.div.insertBefore(e, this.stats);
      this.msg.error = text;
    }
    finish(info) {
      this.render();
      const parts = [];
      const u = info.usage, t = info.timings;
      if (u) {
        const cached = u.prompt_tokens_details ? u.prompt_tokens_details.cached_tokens : 0;
        parts.push(`${u.prompt_tokens} prompt tokens (${cached} cached)`);
        parts.push(`${u.completion_tokens} generated`);
      }
      const ttft = t && typeof t.ttft_ms === "number" ? t.ttft_ms : info.ttftClient;
      if (typeof ttft === "number") parts.push(`TTFT ${ttft.toFixed(0)} ms`);
      if (t && t.predicted_per_second) parts.push(`${t.predicted_per_second.toFixed(1)} tok/s`);
      if (info.finish) parts.push(`finish: ${info.finish}`);
      this.stats.textContent = parts.join(" · ");
      this.msg.stats = { usage: u || null, timings: t || null, finish_reason: info.finish || null };
    }
  }

  // The request's messages: system prompt, then the conversation (reasoning is not sent back).
  function requestMessages() {
    const out = [];
    const system = $("system").value.trim();
    if (system) out.push({ role: "system", content: system });
    for (const m of conversation) {
      if (m.role === "user") {
        if (m.images && m.images.length) {
          out.push({ role: "user", content: [{ type: "text", text: m.text },
            ...m.images.map((url) => ({ type: "image_url", image_url: { url } }))] });
        } else {
          out.push({ role: "user", content: m.text });
        }
      } else if (m.role === "assistant" && !m.error) {
        const a = { role: "assistant", content: m.content };
        const calls = (m.tool_calls || []).filter(Boolean);
        if (calls.length) a.tool_calls = calls;
        out.push(a);
      }
    }
    return out;
  }

  function extraFields() {
    const text = $("extra").value.trim();
    $("extra-error").textContent = "";
    if (!text) return {};
    try {
      const v = JSON.parse(text);
      if (v && typeof v === "object" && !Array.isArray(v)) return v;
      throw new Error("not a JSON object");
    } catch (e) {
      $("extra-error").textContent = "More request fields: " + e.message;
      $("extra").closest("details").open = true;
      return null;
    }
  }

  async function send() {
    const text = $("prompt").value;
    if (controller || (!text.trim() && !pending.length)) return;
    const extra = extraFields();
    if (extra === null) return;
    const user = { role: "user", text, images: pending };
    conversation.push(user);
    showUser(user);
    $("prompt").value = "";
    setPending([]);
    const body = {
      model: $("model").value || undefined,
      messages: requestMessages(),
      stream: true,
      stream_options: { include_usage: true },
      temperature: parseFloat($("temperature").value),
      max_tokens: parseInt($("max-tokens").value, 10),
      ...extra,
    };
    // Thinking on / off: the template's enable_thinking (unset: the server's default, which
    // --chat-template-kwargs may set); extra fields given as JSON keep theirs.
    const thinking = $("thinking").value;
    if (thinking) {
      body.chat_template_kwargs = { enable_thinking: thinking === "on", ...(extra.chat_template_kwargs || {}) };
    }
    if (!isFinite(body.temperature)) delete body.temperature;
    if (!isFinite(body.max_tokens)) delete body.max_tokens;
    const answer = new Answer();
    conversation.push(answer.msg);
    controller = new AbortController();
    $("send").disabled = true;
    $("stop").disabled = false;
    const t0 = performance.now();
    const info = {};
    try {
      const res = await Hearth.api("/v1/chat/completions", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify(body),
        signal: controller.signal,
      });
      if (!res.ok) {
        answer.error(await Hearth.errorText(res));
      } else {
        await readStream(res, (ev) => {
          if (ev.error) {
            answer.error(ev.error.message || JSON.stringify(ev.error));
            return;
          }
          if (ev.usage) info.usage = ev.usage;
          if (ev.timings) info.timings = ev.timings;
          for (const ch of ev.choices || []) {
            const d = ch.delta || {};
            if ((d.content || d.reasoning_content || d.tool_calls) && info.ttftClient === undefined) {
              info.ttftClient = performance.now() - t0;
            }
            if (d.reasoning_content) answer.reasoning(d.reasoning_content);
            if (d.content) answer.text(d.content);
            for (const tc of d.tool_calls || []) answer.toolCall(tc);
            if (ch.finish_reason) info.finish = ch.finish_reason;
          }
        });
      }
    } catch (e) {
      if (e.name === "AbortError") {
        info.finish = "stopped";  // what came so far stays the answer
      } else {
        answer.error("request failed: " + e.message);
      }
    } finally {
      controller = null;
      $("send").disabled = false;
      $("stop").disabled = true;
      answer.finish(info);
    }
  }

  // Reads a text/event-stream body, calling onEvent with each "data:" payload parsed.
  async function readStream(res, onEvent) {
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let cut;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        const event = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        for (const line of event.split("\n")) {
          if (!line.startsWith("data:")) continue;
          const data = line.slice(5).trim();
          if (data === "[DONE]") return;
          try {
            onEvent(JSON.parse(data));
          } catch (e) {
            onEvent({ error: { message: "unreadable event: " + data.slice(0, 200) } });
          }
        }
      }
    }
  }

  function exportJson() {
    const j = {
      model: $("model").value,
      system: $("system").value,
      temperature: parseFloat($("temperature").value),
      max_tokens: parseInt($("max-tokens").value, 10),
      thinking: $("thinking").value || "default",
      messages: conversation.map((m) => (m.role === "user"
        ? { role: "user", content: m.text, images: m.images && m.images.length ? m.images : undefined }
        : { role: "assistant", content: m.content, reasoning_content: m.reasoning || undefined,
            tool_calls: m.tool_calls && m.tool_calls.filter(Boolean).length ? m.tool_calls.filter(Boolean) : undefined,
            error: m.error, stats: m.stats })),
    };
    return JSON.stringify(j, null, 2);
  }

  async function copy() {
    const text = exportJson();
    const out = $("export");
    out.value = text;
    out.hidden = false;
    try {
      await navigator.clipboard.writeText(text);
      $("copy").textContent = "Copied";
    } catch (e) {  // no clipboard here (plain http on another host): the text is shown to copy
      out.select();
      $("copy").textContent = "Copy JSON (select)";
    }
    setTimeout(() => { $("copy").textContent = "Copy JSON"; }, 1500);
  }

  function clear() {
    if (controller) controller.abort();
    conversation = [];
    $("messages").textContent = "";
    $("export").hidden = true;
    $("export").value = "";
  }

  function start() {
    $("chat-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      send();
    });
    $("prompt").addEventListener("keydown", (ev) => {
      if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
        ev.preventDefault();
        send();
      }
    });
    $("stop").addEventListener("click", () => controller && controller.abort());
    $("clear").addEventListener("click", clear);
    $("copy").addEventListener("click", copy);
    $("model").addEventListener("change", visionControls);
    $("image").addEventListener("change", async (ev) => {
      setPending(pending.concat(await readImages(ev.target.files)));
      ev.target.value = "";
    });
    loadModels();
    Hearth.onKey(loadModels);
    // Models load and unload (several models): their states and capabilities change.
    setInterval(() => { if (document.activeElement !== $("model")) loadModels(); }, 5000);
  }

  return { start, exportJson, conversation: () => conversation };
})();
