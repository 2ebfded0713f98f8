// The page's start and its one way to the API: Hearth.api() sends the API key (when one
// was given) as "Authorization: Bearer KEY". A 401 opens the key dialog; the key is kept
// in sessionStorage (this tab), or in localStorage when "remember" is ticked.
"use strict";

const Hearth = (() => {
  const KEY = "hearth.apiKey";
  const $ = (id) => document.getElementById(id);
  const listeners = [];

  function key() {
    return sessionStorage.getItem(KEY) || localStorage.getItem(KEY) || "";
  }

  function setKey(k, remember) {
    sessionStorage.removeItem(KEY);
    localStorage.removeItem(KEY);
    if (k) (remember ? localStorage : sessionStorage).setItem(KEY, k);
    listeners.forEach((f) => f());
  }

  function askKey(reason) {
    const d = $("key-dialog");
    if (d.open) return;
    $("key-reason").textContent = reason;
    $("key-input").value = "";
    d.showModal();
    $("key-input").focus();
  }

  // fetch() of a path of this server, with the key. Returns the Response (any status).
  async function api(path, options = {}) {
    const headers = new Headers(options.headers || {});
    const k = key();
    if (k) headers.set("Authorization", "Bearer " + k);
    const res = await fetch(path, { ...options, headers });
    if (res.status === 401) {
      askKey(k ? "The server refused this API key. Enter the key it was started with (--api-key)."
               : "This server needs an API key (it was started with --api-key).");
    }
    return res;
  }

  // The message of an error answer ({"error": {"message"}}), else its status line.
  async function errorText(res) {
    try {
      const j = await res.json();
      if (j && j.error && j.error.message) return `${res.status}: ${j.error.message}`;
    } catch (e) { /* not JSON */ }
    return `${res.status} ${res.statusText}`;
  }

  function start() {
    $("key-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      setKey($("key-input").value.trim(), $("key-remember").checked);
      $("key-dialog").close();
    });
    $("key-forget").addEventListener("click", () => {
      setKey("", false);
      $("key-dialog").close();
    });
    $("key-button").addEventListener("click", () => askKey(key() ? "Change the API key." : "Enter the API key."));
    HearthLive.start();
    HearthChat.start();
  }

  document.addEventListener("DOMContentLoaded", start);
  // f() runs when the key changes (the views fetch again).
  return { api, key, errorText, onKey: (f) => listeners.push(f), $ };
})();
