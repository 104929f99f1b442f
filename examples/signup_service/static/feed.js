// The dashboards' feed: the unread badge and the list, refreshed on every SSE `refresh` event
// (the events carry no payload: the page refetches what its principal may see), and every
// POLL seconds while the stream is down. EventSource reconnects by itself after a dropped
// connection; after a refusal (readyState CLOSED) the page opens a new one a poll later.
"use strict";

(function () {
  const body = document.body;
  const pollMs = Number(body.dataset.pollSeconds) * 1000;
  const badge = document.getElementById("badge");
  const mode = document.getElementById("mode");
  const list = document.getElementById("notifications");
  const empty = document.getElementById("empty");
  let poller = null;

  async function refresh() {
    try {
      const [count, page] = await Promise.all([
        fetch("/feed/notifications/unread-count", { cache: "no-store" }),
        fetch("/feed/notifications?limit=20", { cache: "no-store" }),
      ]);
      if (!count.ok || !page.ok) return;
      const unread = (await count.json()).unread;
      badge.textContent = String(unread);
      badge.dataset.unread = String(unread);
      badge.classList.toggle("zero", unread === 0);
      render((await page.json()).items);
    } catch (err) {
      // offline: the next event or poll tries again
    }
  }

  function render(items) {
    list.replaceChildren();
    empty.hidden = items.length > 0;
    for (const item of items) {
      const li = document.createElement("li");
      li.className = item.read_at ? "read" : "unread";
      li.dataset.id = String(item.id);
      const title = document.createElement("strong");
      title.textContent = item.title;
      const text = document.createElement("p");
      text.textContent = item.body;
      const when = document.createElement("time");
      when.dateTime = item.created_at;
      when.textContent = new Date(item.created_at).toLocaleString();
      li.append(title, text, when);
      if (!item.read_at) {
        const button = document.createElement("button");
        button.type = "button";
        button.className = "mark-read";
        button.textContent = "Mark read";
        button.addEventListener("click", () => post(`/feed/notifications/${item.id}/read`));
        li.append(button);
      }
      list.append(li);
    }
  }

  async function post(url) {
    await fetch(url, { method: "POST" });
    await refresh();
  }

  function live(on) {
    mode.dataset.mode = on ? "live" : "polling";
    mode.textContent = on ? "live" : `stream down: polling every ${pollMs / 1000} s`;
    if (on && poller !== null) {
      clearInterval(poller);
      poller = null;
    } else if (!on && poller === null) {
      poller = setInterval(refresh, pollMs);
    }
  }

  function connect() {
    const stream = new EventSource("/feed/stream");
    stream.addEventListener("open", () => {
      live(true);
      refresh();
    });
    stream.addEventListener("refresh", refresh);
    stream.addEventListener("error", () => {
      live(false);
      if (stream.readyState === EventSource.CLOSED) setTimeout(connect, pollMs);
    });
  }

  document.getElementById("read-all").addEventListener("click", () => post("/feed/notifications/read-all"));
  live(false);
  refresh();
  connect();
})();
