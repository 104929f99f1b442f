// The endpoint portal: one tenant's endpoints (text only, via textContent), registration, the
// secret shown once per reveal or rotation (never stored by the page), deliveries with a replay
// button, and a test event. Every change is JSON to the same origin; the server names the tenant.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const status = $("status");
  let selected = null;   // the endpoint shown in the detail card
  let confirmDelete = false;
  let missed = [];       // events the endpoint missed while disabled (from the last enable)

  function say(text, failed) {
    status.textContent = text;
    status.className = failed ? "error" : "";
  }

  function when(iso) {
    return iso ? new Date(iso).toLocaleString() : "-";
  }

  async function api(method, path, body) {
    const init = { method, cache: "no-store", headers: {} };
    if (body !== undefined) {
      init.headers["content-type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const answer = await fetch(`api/${path}`, init);
    let json = {};
    try { json = await answer.json(); } catch (e) { json = { error: `HTTP ${answer.status}` }; }
    return { ok: answer.ok, status: answer.status, json };
  }

  function pill(text, kind) {
    const span = document.createElement("span");
    span.className = `pill ${kind}`;
    span.textContent = text;
    return span;
  }

  function cell(tr, value, className) {
    const td = document.createElement("td");
    if (className) td.className = className;
    if (value instanceof Node) td.append(value); else td.textContent = value == null ? "-" : String(value);
    tr.append(td);
    return td;
  }

  function stateOf(e) {
    return e.enabled ? pill("enabled", "enabled") : pill("disabled", "disabled");
  }

  async function loadEndpoints() {
    const got = await api("GET", "endpoints");
    if (!got.ok) { say(`could not load the endpoints: ${got.json.error}`, true); return []; }
    const body = document.querySelector("#endpoints tbody");
    body.replaceChildren();
    for (const e of got.json.endpoints) {
      const tr = document.createElement("tr");
      tr.dataset.id = String(e.id);
      if (selected && selected.id === e.id) tr.className = "selected";
      cell(tr, e.url, "mono");
      cell(tr, e.description);
      cell(tr, e.event_types.join(", "), "mono");
      cell(tr, e.scheme);
      cell(tr, stateOf(e));
      const button = document.createElement("button");
      button.type = "button";
      button.className = "manage";
      button.textContent = "Manage";
      button.addEventListener("click", () => select(e.id));
      cell(tr, button);
      body.append(tr);
    }
    $("empty").hidden = got.json.endpoints.length > 0;
    return got.json.endpoints;
  }

  function hideSecret() {
    $("secret-value").textContent = "";
    $("secret").hidden = true;
  }

  function showSecret(value, label) {
    $("secret-label").textContent = label;
    $("secret-value").textContent = value;
    $("secret").hidden = false;
  }

  function renderDetail(e) {
    if (!selected || selected.id !== e.id) { missed = []; $("replay-missed").hidden = true; }
    selected = e;
    $("detail").hidden = false;
    $("detail-title").textContent = e.description ? `${e.description}: ${e.url}` : e.url;
    const state = $("detail-state");
    state.replaceChildren(stateOf(e));
    if (!e.enabled) state.append(` ${e.disabled_reason || ""} (since ${when(e.disabled_at)})`);
    $("detail-events").textContent = e.event_types.join(", ");
    $("detail-scheme").textContent = e.scheme === "v1a" ? "v1a: Ed25519, verify with the public key (whpk_)" : "v1: HMAC-SHA256, verify with the secret (whsec_)";
    $("detail-created").textContent = when(e.created_at);
    $("detail-rate").textContent = e.max_per_second ? `at most ${e.max_per_second} requests a second` : "no cap";
    $("enable-box").hidden = e.enabled;
    $("disable-box").hidden = !e.enabled;
    $("reveal").textContent = e.scheme === "v1a" ? "Reveal public key" : "Reveal secret";
    $("delete").textContent = "Delete";
    confirmDelete = false;
    for (const tr of document.querySelectorAll("#endpoints tbody tr")) {
      tr.className = tr.dataset.id === String(e.id) ? "selected" : "";
    }
  }

  async function select(id) {
    if (!selected || selected.id !== id) hideSecret();
    const got = await api("GET", `endpoints/${id}`);
    if (!got.ok) { say(got.json.error, true); $("detail").hidden = true; selected = null; return; }
    history.replaceState(null, "", `#endpoint-${id}`);
    renderDetail(got.json.endpoint);
    await loadDeliveries();
  }

  // A delivery's last attempts (oldest first), as a hidden row holding a small table.
  function attemptsOf(log) {
    const table = document.createElement("table");
    table.className = "attempts";
    const head = document.createElement("tr");
    for (const title of ["attempt at", "code", "error", "response"]) {
      const th = document.createElement("th");
      th.textContent = title;
      head.append(th);
    }
    const thead = document.createElement("thead");
    thead.append(head);
    const tbody = document.createElement("tbody");
    for (const a of log) {
      const tr = document.createElement("tr");
      cell(tr, when(a.at));
      cell(tr, a.status, "num");
      cell(tr, a.error, "snippet");
      cell(tr, a.response, "snippet");
      tbody.append(tr);
    }
    table.append(thead, tbody);
    const row = document.createElement("tr");
    row.className = "attempts-log";
    row.hidden = true;
    const holder = cell(row, table);
    holder.colSpan = 9;
    return row;
  }

  async function loadDeliveries() {
    if (!selected) return;
    const wanted = $("delivery-status").value;
    const query = wanted ? `?status=${encodeURIComponent(wanted)}` : "";
    const got = await api("GET", `endpoints/${selected.id}/deliveries${query}`);
    const body = document.querySelector("#deliveries tbody");
    body.replaceChildren();
    if (!got.ok) { say(`could not load the deliveries: ${got.json.error}`, true); return; }
    for (const d of got.json.deliveries) {
      const tr = document.createElement("tr");
      tr.dataset.id = String(d.id);
      tr.dataset.event = String(d.event_id);
      cell(tr, d.id, "num");
      const event = document.createElement("span");
      event.textContent = d.event_type;
      event.title = `event ${d.event_id}, webhook-id ${d.msg_id}`;
      cell(tr, event, "mono");
      cell(tr, pill(d.status === "dispatched" ? "delivered" : d.status, d.status));
      const log = d.attempts_log || [];
      let attemptsRow = null;
      if (log.length) {
        const toggle = document.createElement("button");
        toggle.type = "button";
        toggle.className = "attempts-toggle";
        toggle.textContent = `${d.attempts} attempt${d.attempts === 1 ? "" : "s"}`;
        toggle.setAttribute("aria-expanded", "false");
        attemptsRow = attemptsOf(log);
        toggle.addEventListener("click", () => {
          attemptsRow.hidden = !attemptsRow.hidden;
          toggle.setAttribute("aria-expanded", String(!attemptsRow.hidden));
        });
        cell(tr, toggle, "num");
      } else {
        cell(tr, d.attempts, "num");
      }
      cell(tr, d.last_status, "num");
      cell(tr, d.response || d.last_error, "snippet");
      cell(tr, when(d.updated_at));
      cell(tr, d.next_attempt_at ? when(d.next_attempt_at) : "-");
      const td = cell(tr, "");
      if (d.status === "failed" || d.status === "skipped" || d.status === "dispatched") {
        const button = document.createElement("button");
        button.type = "button";
        button.className = "replay";
        button.textContent = "Replay";
        button.addEventListener("click", () => replay(d.event_id));
        td.append(button);
      }
      body.append(tr);
      if (attemptsRow) body.append(attemptsRow);
      if (d.data !== undefined) {
        const extra = document.createElement("tr");
        extra.className = "data";
        const pre = document.createElement("pre");
        pre.textContent = JSON.stringify(d.data, null, 2);
        const holder = cell(extra, pre);
        holder.colSpan = 9;
        body.append(extra);
      }
    }
    $("no-deliveries").hidden = got.json.deliveries.length > 0;
    $("deliveries").hidden = got.json.deliveries.length === 0;
  }

  async function act(method, path, body, done) {
    const got = await api(method, path, body);
    if (!got.ok) { say(got.json.error, true); return null; }
    if (done) say(done(got.json));
    return got.json;
  }

  async function replay(eventId) {
    const id = selected.id;
    const got = await act("POST", `endpoints/${id}/replay`, { event_id: eventId },
      (r) => `event ${eventId} replayed as event ${r.event_id}`);
    if (got) await loadDeliveries();
  }

  $("send-test").addEventListener("click", async () => {
    const got = await act("POST", `endpoints/${selected.id}/test`, {},
      (r) => `test event ${r.event_id} sent (webhook-id ${r.msg_id})`);
    if (got) await loadDeliveries();
  });

  $("reveal").addEventListener("click", async () => {
    const got = await act("POST", `endpoints/${selected.id}/secret`, {});
    if (got) { showSecret(got.verify_with, selected.scheme === "v1a" ? "Public key" : "Signing secret"); say(""); }
  });

  $("rotate").addEventListener("click", async () => {
    const got = await act("POST", `endpoints/${selected.id}/rotate`, {},
      () => "rotated: the previous secret keeps signing beside the new one for 24 hours");
    if (got) showSecret(got.verify_with, selected.scheme === "v1a" ? "New public key" : "New signing secret");
  });

  $("disable").addEventListener("click", async () => {
    const reason = $("disable-reason").value.trim();
    if (!reason) { say("say why you disable it", true); $("disable-reason").focus(); return; }
    const got = await act("POST", `endpoints/${selected.id}/disable`, { reason }, () => "disabled");
    if (got) { $("disable-reason").value = ""; renderDetail(got.endpoint); await loadEndpoints(); }
  });

  $("enable").addEventListener("click", async () => {
    const got = await act("POST", `endpoints/${selected.id}/enable`, {},
      (r) => r.missed.length ? `enabled; ${r.missed.length} event(s) came while it was disabled` : "enabled");
    if (got) {
      renderDetail(got.endpoint);
      missed = got.missed;
      $("replay-missed").hidden = missed.length === 0;
      $("replay-missed").textContent = `Replay ${missed.length} missed event(s)`;
      await loadEndpoints();
    }
  });

  $("replay-missed").addEventListener("click", async () => {
    const id = selected.id;
    let done = 0;
    for (const eventId of missed) {
      const got = await api("POST", `endpoints/${id}/replay`, { event_id: eventId });
      if (!got.ok) { say(got.json.error, true); break; }
      done += 1;
    }
    missed = missed.slice(done);
    $("replay-missed").hidden = missed.length === 0;
    if (done) say(`replayed ${done} missed event(s)`);
    await loadDeliveries();
  });

  $("delete").addEventListener("click", async () => {
    if (!confirmDelete) {
      confirmDelete = true;
      $("delete").textContent = "Really delete?";
      return;
    }
    const got = await act("DELETE", `endpoints/${selected.id}`, undefined, (r) => `endpoint ${r.deleted} deleted`);
    if (got) {
      selected = null;
      hideSecret();
      $("detail").hidden = true;
      history.replaceState(null, "", "#");
      await loadEndpoints();
    }
  });

  $("copy-secret").addEventListener("click", async () => {
    try { await navigator.clipboard.writeText($("secret-value").textContent); say("copied"); }
    catch (e) { say("copy it by hand: select the text", true); }
  });
  $("hide-secret").addEventListener("click", hideSecret);
  $("refresh").addEventListener("click", loadDeliveries);
  $("delivery-status").addEventListener("change", loadDeliveries);

  $("add").addEventListener("submit", async (event) => {
    event.preventDefault();
    const form = $("add");
    for (const input of form.querySelectorAll("input")) input.removeAttribute("aria-invalid");
    const body = {
      url: $("add-url").value.trim(),
      event_types: $("add-events").value.split(/[\s,]+/).filter(Boolean),
      description: $("add-description").value.trim() || null,
      scheme: $("add-scheme").value,
    };
    const got = await api("POST", "endpoints", body);
    if (!got.ok) {
      $("add-error").textContent = got.json.error;
      const input = got.json.field && form.querySelector(`[name="${got.json.field}"]`);
      if (input) { input.setAttribute("aria-invalid", "true"); input.focus(); }
      return;
    }
    $("add-error").textContent = "";
    form.reset();
    await loadEndpoints();
    await select(got.json.endpoint.id);
    showSecret(got.json.verify_with, got.json.endpoint.scheme === "v1a" ? "Public key" : "Signing secret");
    say(`endpoint ${got.json.endpoint.id} registered`);
  });

  (async () => {
    const endpoints = await loadEndpoints();
    const wanted = /^#endpoint-(\d+)$/.exec(location.hash);
    if (wanted) await select(Number(wanted[1]));
    else if (endpoints.length) await select(endpoints[0].id);
  })();
})();
