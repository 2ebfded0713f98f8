// Markdown of model answers, rendered safely: the text only ever becomes DOM text nodes
// (createTextNode / textContent) inside elements this file creates; nothing of it is ever
// parsed as HTML, so "<script>" in an answer shows as those characters. Covers what chat
// models write: paragraphs, line breaks, headings, fenced and inline code, bold, italics,
// lists, block quotes, rules and links (http, https and mailto only).
"use strict";

const HearthMarkdown = (() => {
  function el(tag, parent, text) {
    const e = document.createElement(tag);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }

  // Inline spans: `code`, **bold**, __bold__, *em*, _em_, [text](url). Earliest match wins.
  const INLINE = /`([^`\n]+)`|\*\*(?=\S)([\s\S]+?)\*\*|(?<![\w])__(?=\S)([\s\S]+?)__(?![\w])|\*(?=[^\s*])([^*\n]+?)\*|(?<![\w])_(?=[^\s_])([^_\n]+?)_(?![\w])|\[([^\]\n]+)\]\(([^)\s]+)\)/;
  const SAFE_URL = /^(https?:\/\/|mailto:)/i;

  function inline(text, parent) {
    let rest = text;
    while (rest.length > 0) {
      const m = INLINE.exec(rest);
      if (!m) {
        parent.appendChild(document.createTextNode(rest));
        return;
      }
      if (m.index > 0) parent.appendChild(document.createTextNode(rest.slice(0, m.index)));
      if (m[1] !== undefined) {
        el("code", parent, m[1]);
      } else if (m[2] !== undefined || m[3] !== undefined) {
        inline(m[2] !== undefined ? m[2] : m[3], el("strong", parent));
      } else if (m[4] !== undefined || m[5] !== undefined) {
        inline(m[4] !== undefined ? m[4] : m[5], el("em", parent));
      } else if (SAFE_URL.test(m[7])) {
        const a = el("a", parent);
        a.setAttribute("href", m[7]);
        a.setAttribute("rel", "noopener noreferrer nofollow");
        a.setAttribute("target", "_blank");
        inline(m[6], a);
      } else {
        parent.appendChild(document.createTextNode(m[0]));  // not a link we follow: as written
      }
      rest = rest.slice(m.index + m[0].length);
    }
  }

  // Lines joined by <br> (a chat answer's single newlines are meant).
  function lines(list, parent) {
    list.forEach((l, i) => {
      if (i > 0) el("br", parent);
      inline(l, parent);
    });
  }

  const FENCE = /^\s*(```|~~~)\s*([\w+.#-]*)\s*$/;
  const HEADING = /^(#{1,6})\s+(.*)$/;
  const RULE = /^\s*([-*_])(\s*\1){2,}\s*$/;
  const ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;
  const QUOTE = /^\s*>\s?(.*)$/;

  function blocks(src, parent) {
    const ls = src.replace(/\r\n?/g, "\n").split("\n");
    let i = 0;
    while (i < ls.length) {
      const line = ls[i];
      let m;
      if (line.trim() === "") {
        i++;
      } else if ((m = FENCE.exec(line))) {  // to the closing fence, or the end (still streaming)
        const body = [];
        for (i++; i < ls.length && !(FENCE.exec(ls[i]) && ls[i].trim().startsWith(m[1])); i++) body.push(ls[i]);
        i++;
        const code = el("code", el("pre", parent), body.join("\n"));
        if (m[2]) code.setAttribute("data-lang", m[2]);
      } else if ((m = HEADING.exec(line))) {
        inline(m[2], el("h" + Math.min(6, m[1].length + 1), parent));  // h2.. inside a message
        i++;
      } else if (RULE.test(line)) {
        el("hr", parent);
        i++;
      } else if (QUOTE.test(line)) {
        const inner = [];
        for (; i < ls.length && (m = QUOTE.exec(ls[i])); i++) inner.push(m[1]);
        blocks(inner.join("\n"), el("blockquote", parent));
      } else if ((m = ITEM.exec(line))) {
        const ordered = /\d/.test(m[2]);
        const list = el(ordered ? "ol" : "ul", parent);
        if (ordered && parseInt(m[2], 10) !== 1) list.setAttribute("start", String(parseInt(m[2], 10)));
        let item = null;
        for (; i < ls.length; i++) {
          const l = ls[i];
          const im = ITEM.exec(l);
          if (im && /\d/.test(im[2]) === ordered) {
            item = el("li", list);
            inline(im[3], item);
          } else if (item && l.trim() !== "" && /^\s+/.test(l)) {  // a continuation line
            el("br", item);
            inline(l.trim(), item);
          } else {
            break;
          }
        }
      } else {
        const para = [];
        for (; i < ls.length; i++) {
          const l = ls[i];
          if (l.trim() === "" || FENCE.test(l) || HEADING.test(l) || QUOTE.test(l) || ITEM.test(l) || RULE.test(l)) break;
          para.push(l);
        }
        lines(para, el("p", parent));
      }
    }
  }

  // A DocumentFragment of `text` rendered.
  function render(text) {
    const frag = document.createDocumentFragment();
    blocks(String(text || ""), frag);
    return frag;
  }

  return { render };
})();
