// The live view: fetch the server-rendered panel every few seconds and swap it in.
"use strict";
(function () {
  const root = document.getElementById("live");
  const status = document.getElementById("live-status");
  if (!root) return;
  const every = Math.max(1000, Number(root.dataset.refreshMs) || 3000);
  let busy = false;

  async function refresh() {
    if (busy || document.hidden) return;
    busy = true;
    try {
      const res = await fetch(root.dataset.panel, { credentials: "same-origin", headers: { Accept: "text/html" } });
      if (res.status === 401) {
        window.location.assign("/admin/login?next=" + encodeURIComponent("/admin/live"));
        return;
      }
      if (!res.ok) throw new Error("HTTP " + res.status);
      root.innerHTML = await res.text();
      root.dataset.updated = String(Date.now());
      status.textContent = "Updated " + new Date().toLocaleTimeString() + "; refreshes every " + every / 1000 + " s.";
    } catch (err) {
      status.textContent = "Could not refresh (" + err.message + "); retrying.";
    } finally {
      busy = false;
    }
  }

  setInterval(refresh, every);
  document.addEventListener("visibilitychange", () => { if (!document.hidden) refresh(); });
})();
