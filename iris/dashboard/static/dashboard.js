// Live refresh: every few seconds, fetch this page's main part again and swap it in.
// Pauses while the tab is hidden or the user is typing in a filter, so nothing moves under the cursor.
(function () {
  "use strict";
  var seconds = Number(document.body.dataset.refresh || 0);
  var main = document.getElementById("content");
  var live = document.getElementById("live");
  if (!seconds || !main) { return; }
  var busy = false;

  function typing() {
    var el = document.activeElement;
    return el && main.contains(el) && (el.tagName === "INPUT" || el.tagName === "SELECT");
  }

  function refresh() {
    if (busy || document.hidden || typing()) { return; }
    busy = true;
    fetch(window.location.href, { headers: { "X-Iris-Partial": "1" }, cache: "no-store" })
      .then(function (response) {
        if (!response.ok && response.status !== 404) { throw new Error("HTTP " + response.status); }  // 503: keep the last page
        return response.text();
      })
      .then(function (html) {
        if (!typing()) { main.innerHTML = html; }
        live.classList.remove("stale");
        live.textContent = "live";
      })
      .catch(function () {
        live.classList.add("stale");
        live.textContent = "reconnecting";
      })
      .then(function () { busy = false; });
  }

  window.setInterval(refresh, seconds * 1000);
}());
