// The live view: GET /v1/status every second, its numbers into the cards and the models
// table, the rates and recent percentiles onto the charts.
"use strict";

const HearthLive = (() => {
  const $ = (id) => document.getElementById(id);
  let charts = null;
  let timer = null;
  let busy = false;
  let last = null;  // the last status document (the chat panel reads the models' facts)

  const fmt = {
    n: (v) => (v === null || v === undefined ? "–" : Number(v).toLocaleString("en-US", { maximumFractionDigits: 0 })),
    rate: (v) => (v === null || v === undefined ? "–" : v >= 100 ? v.toFixed(0) : v.toFixed(1)),
    pct: (v) => (v === null || v === undefined ? "–" : (100 * v).toFixed(1) + " %"),
    secs(v) {
      if (v === null || v === undefined) return "–";
      if (v < 0.001) return (v * 1e6).toFixed(0) + " µs";
      if (v < 1) return (v * 1000).toFixed(v < 0.01 ? 1 : 0) + " ms";
      return v.toFixed(2) + " s";
    },
    bytes(v) {
      if (v === null || v === undefined) return "–";
      const u = ["B", "KiB", "MiB", "GiB", "TiB"];
      let i = 0;
      while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
      return (i === 0 ? v.toFixed(0) : v.toFixed(1)) + " " + u[i];
    },
    params(v) {
      if (!v) return "–";
      if (v >= 1e9) return (v / 1e9).toFixed(1) + "B";
      if (v >= 1e6) return (v / 1e6).toFixed(0) + "M";
      return String(v);
    },
  };

  function set(id, text) {
    const e = $(id);
    if (e.textContent !== text) e.textContent = text;
  }

  function pcts(h) {
    const r = h && h.recent;
    if (!r || !r.count) return "–";
    return [r.p50, r.p90, r.p99].map(fmt.secs).join(" · ");
  }

  function connection(ok, text) {
    $("conn").className = "dot " + (ok ? "ok" : "bad");
    set("conn-text", text);
  }

  function show(s) {
    last = s;
    const r = s.requests, t = s.tokens, kv = s.kv, pc = s.prefix_cache, b = s.batch.size.recent;
    set("stat-running", fmt.n(r.running));
    set("stat-waiting", fmt.n(r.waiting));
    const f = r.finished;
    set("stat-finished", fmt.n(f.stop + f.length + f.cancelled + f.error));
    set("stat-out-rate", fmt.rate(t.out_per_s));
    set("stat-in-rate", fmt.rate(t.in_per_s));
    set("stat-sampled", fmt.n(t.sampled_total));
    set("stat-ttft", pcts(s.latency.ttft_seconds));
    set("stat-itl", pcts(s.latency.inter_token_seconds));
    set("stat-batch", b && b.count ? b.mean.toFixed(1) : "–");
    set("stat-batch-p99", b && b.count ? fmt.rate(b.p99) : "–");
    set("stat-steps", fmt.n(s.batch.steps));
    set("stat-kv-used", fmt.n(kv.blocks_used));
    set("stat-kv-cached", fmt.n(kv.blocks_cached));
    set("stat-kv-free", fmt.n(kv.blocks_free));
    const disk = s.kv_disk;
    set("stat-kv-disk", disk.disabled ? "off (disk error)" : disk.blocks || disk.bytes
      ? `${fmt.n(disk.blocks)} blocks, ${fmt.n(disk.hit_tokens)} prompt tokens read back` : "none");
    const total = kv.blocks_total || 1;
    const bar = $("kv-bar");
    bar.title = `${kv.blocks_used} in use, ${kv.blocks_cached} kept for prefix reuse, ${kv.blocks_free} free of ${kv.blocks_total}`;
    bar.querySelector(".used").style.width = (100 * kv.blocks_used / total) + "%";
    bar.querySelector(".cached").style.width = (100 * kv.blocks_cached / total) + "%";
    set("stat-hit-rate", fmt.pct(pc.hit_rate));
    set("stat-hit-recent", fmt.pct(pc.recent_hit_rate));
    set("stat-preemptions", fmt.n(s.preemptions));
    const devices = s.models.map((m) => m.device).filter(Boolean);
    set("stat-device-mem", s.memory.device_bytes || devices.some((d) => d !== "cpu")
      ? fmt.bytes(s.memory.device_bytes) : "none (CPU)");
    set("stat-host-mem", fmt.bytes(s.memory.host_resident_bytes));
    models(s.models);
    const tt = s.latency.ttft_seconds.recent, it = s.latency.inter_token_seconds.recent;
    charts.tokens.push([t.out_per_s, t.in_per_s]);
    charts.ttft.push([tt && tt.count ? tt.p50 : null, tt && tt.count ? tt.p90 : null]);
    charts.itl.push([it && it.count ? it.p50 : null, it && it.count ? it.p90 : null]);
    charts.requests.push([r.running, r.waiting]);
    const up = s.status === "ok";
    connection(up, up ? `up ${Math.floor(s.uptime_s)} s` : `engine ${s.status}`);
  }

  function models(list) {
    const body = $("models").tBodies[0];
    const rows = list.map((m) => [
      m.name, m.state, m.architecture || "–", fmt.params(m.parameters), m.quantization || "–",
      m.context_length ? fmt.n(m.context_length) : "–", m.device || "–",
      m.device_bytes ? fmt.bytes(m.device_bytes) + " dev" : fmt.bytes(m.memory_bytes),
      m.requests ? String(m.requests.running) + (m.requests.waiting ? ` (+${m.requests.waiting} waiting)` : "") : "–",
    ]);
    while (body.rows.length > rows.length) body.deleteRow(-1);
    rows.forEach((cells, i) => {
      const tr = body.rows[i] || body.insertRow();
      cells.forEach((c, k) => {
        const td = tr.cells[k] || tr.insertCell();
        if (td.textContent !== String(c)) td.textContent = String(c);
      });
    });
  }

  async function poll() {
    if (busy) return;
    busy = true;
    try {
      const res = await Hearth.api("/v1/status?window=10");
      if (res.ok) {
        show(await res.json());
      } else {
        connection(false, await Hearth.errorText(res));
      }
    } catch (e) {
      connection(false, "no answer from the server");
    } finally {
      busy = false;
    }
  }

  function start() {
    charts = {
      tokens: new HearthChart($("chart-tokens"), [{ color: "--out" }, { color: "--in" }]),
      ttft: new HearthChart($("chart-ttft"), [{ color: "--out" }, { color: "--p90" }]),
      itl: new HearthChart($("chart-itl"), [{ color: "--out" }, { color: "--p90" }]),
      requests: new HearthChart($("chart-requests"), [{ color: "--out" }, { color: "--in" }]),
    };
    poll();
    timer = setInterval(poll, 1000);
    Hearth.onKey(poll);
  }

  return { start, poll, status: () => last, fmt };
})();
