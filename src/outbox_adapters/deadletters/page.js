// The dead-letter page: the failed rows of the chosen outbox (text only, via textContent) and a
// requeue button per row, posting JSON with the reason typed above (the server audits it).
"use strict";
(function () {
  const queue = document.getElementById("queue");
  const reason = document.getElementById("reason");
  const status = document.getElementById("status");

  function when(iso) {
    return iso ? new Date(iso).toLocaleString() : null;
  }

  function cells(tr, values) {
    for (const [value, numeric] of values) {
      const td = document.createElement("td");
      if (numeric) td.className = "num";
      td.textContent = value == null ? "-" : String(value);
      tr.append(td);
    }
  }

  async function load() {
    const answer = await fetch(`api/failed?queue=${encodeURIComponent(queue.value)}`, { cache: "no-store" });
    if (!answer.ok) { status.textContent = `could not load (${answer.status})`; return; }
    const report = await answer.json();
    const groups = document.querySelector("#groups tbody");
    groups.replaceChildren();
    for (const g of report.groups) {
      const tr = document.createElement("tr");
      cells(tr, [[g.error_class], [g.rows, true], [when(g.first_failed_at)], [when(g.last_failed_at)]]);
      groups.append(tr);
    }
    const rows = document.querySelector("#rows tbody");
    rows.replaceChildren();
    for (const r of report.rows) {
      const tr = document.createElement("tr");
      tr.dataset.id = String(r.id);
      cells(tr, [[r.id, true], [r.lane], [r.attempts, true], [when(r.failed_at)], [r.error_class]]);
      const td = document.createElement("td");
      if (r.requeueable) {
        const button = document.createElement("button");
        button.type = "button";
        button.className = "requeue";
        button.textContent = "Requeue";
        button.addEventListener("click", () => requeue(r.id));
        td.append(button);
      } else {
        td.textContent = r.note || "sent: secrets scrubbed, not requeueable";
      }
      tr.append(td);
      rows.append(tr);
    }
  }

  async function requeue(id) {
    const answer = await fetch("api/requeue", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ queue: queue.value, ids: [id], reason: reason.value || null }),
    });
    const result = await answer.json();
    status.textContent = answer.ok
      ? (result.requeued.length ? `requeued ${result.requeued.join(", ")}` : `refused: ${Object.values(result.refused).join("; ")}`)
      : `error: ${result.error}`;
    await load();
  }

  queue.addEventListener("change", load);
  load();
})();
