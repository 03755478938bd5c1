// Live refresh: every few seconds, fetch this page's main part again and swap it in.
// Pauses while the tab is hidden or the user is typing in a filter, so nothing moves under the cursor.
// A page the server built from a cached read past its ttl (X-Iris-Stale; data-stale on a whole page) is
// fetched again `soon`, once the fresh read it started is there; only once in a row, so a server that
// cannot refresh (Temporal away) is not asked more often than every few seconds.
(function () {
  "use strict";
  var seconds = Number(document.body.dataset.refresh || 0);
  var soon = 0.5;  // seconds
  var main = document.getElementById("content");
  var live = document.getElementById("live");
  if (!seconds || !main) { return; }

  function typing() {
    var el = document.activeElement;
    return el && main.contains(el) && (el.tagName === "INPUT" || el.tagName === "SELECT");
  }

  function later(stale, quick) {
    var again = stale && !quick;  // one quick follow-up, then the period
    window.setTimeout(refresh, (again ? soon : seconds) * 1000, again);
  }

  function refresh(quick) {
    if (document.hidden || typing()) { later(false, false); return; }
    var stale = false;
    fetch(window.location.href, { headers: { "X-Iris-Partial": "1" }, cache: "no-store" })
      .then(function (response) {
        if (!response.ok && response.status !== 404) { throw new Error("HTTP " + response.status); }  // 503: keep the last page
        stale = response.headers.get("X-Iris-Stale") === "1";
        return response.text();
      })
      .then(function (html) {
        if (!typing()) { main.innerHTML = html; }
        live.classList.remove("stale");
        live.textContent = "live";
      })
      .catch(function () {
        stale = false;
        live.classList.add("stale");
        live.textContent = "reconnecting";
      })
      .then(function () { later(stale, quick); });
  }

  later(document.body.dataset.stale === "1", false);
}());
