// Small line charts on a canvas for the live view: the last N values of a few series,
// drawn from zero to the largest value shown (with that value written in the corner).
"use strict";

class HearthChart {
  // series: [{color: CSS variable name ("--out"), ...}], one value each per push().
  constructor(canvas, series, points = 120) {
    this.canvas = canvas;
    this.series = series;
    this.points = points;
    this.data = series.map(() => []);
  }

  // values: one number (or null: no value then) per series.
  push(values) {
    values.forEach((v, i) => {
      const d = this.data[i];
      d.push(typeof v === "number" && isFinite(v) ? v : null);
      if (d.length > this.points) d.shift();
    });
    this.draw();
  }

  draw() {
    const c = this.canvas;
    const dpr = window.devicePixelRatio || 1;
    const w = c.clientWidth || c.width, h = c.clientHeight || c.height;
    if (c.width !== Math.round(w * dpr) || c.height !== Math.round(h * dpr)) {
      c.width = Math.round(w * dpr);
      c.height = Math.round(h * dpr);
    }
    const g = c.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    const css = getComputedStyle(document.documentElement);
    let max = 0;
    for (const d of this.data) for (const v of d) if (v !== null && v > max) max = v;
    const top = 12, bottom = h - 2;
    g.strokeStyle = css.getPropertyValue("--line");
    g.lineWidth = 1;
    g.beginPath();
    g.moveTo(0, bottom + 0.5);
    g.lineTo(w, bottom + 0.5);
    g.stroke();
    g.fillStyle = css.getPropertyValue("--muted");
    g.font = "10px system-ui, sans-serif";
    g.fillText(max > 0 ? HearthChart.label(max) : "0", 2, 10);
    if (max <= 0) max = 1;
    const step = w / Math.max(1, this.points - 1);
    this.data.forEach((d, i) => {
      g.strokeStyle = css.getPropertyValue(this.series[i].color) || "#888";
      g.lineWidth = 1.5;
      g.beginPath();
      let pen = false;
      const x0 = w - (d.length - 1) * step;
      d.forEach((v, k) => {
        if (v === null) {
          pen = false;
          return;
        }
        const x = x0 + k * step, y = bottom - (v / max) * (bottom - top);
        pen ? g.lineTo(x, y) : g.moveTo(x, y);
        pen = true;
      });
      g.stroke();
    });
  }

  static label(v) {
    if (v >= 1000) return (v / 1000).toFixed(1) + "k";
    if (v >= 10) return v.toFixed(0);
    if (v >= 1) return v.toFixed(1);
    return v.toPrecision(2);
  }
}
