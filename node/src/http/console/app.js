// Engram's web console: a small static app over the documented JSON API.
//
// The API key typed at sign-in is kept in this tab's sessionStorage (never in a URL or a
// cookie) and sent as `Authorization: Bearer <key>` to this node's API only, so scopes,
// masking of personal data, rate limits and the audit trail apply as to any client.
// Everything shown is built with DOM calls and text nodes: no data is ever parsed as HTML
// (memory texts and ids are untrusted).
"use strict";

(() => {
  const KEY = "engram.console.key";
  const TENANT = "engram.console.tenant";
  const ROLE = "engram.console.role";

  const $ = (id) => document.getElementById(id);

  /** An element with attributes (`class`, `on<event>` handlers, others as attributes) and
   * children (nodes, or strings made text nodes). */
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (name === "class") node.className = value;
      else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child === undefined || child === null) continue;
      node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

  function table(headers, rows, attrs) {
    return el(
      "table",
      attrs,
      el("thead", null, el("tr", null, headers.map((h) => el("th", null, h)))),
      el("tbody", null, rows),
    );
  }

  const time = (ms) =>
    ms === null || ms === undefined
      ? ""
      : new Date(ms).toISOString().replace("T", " ").slice(0, 19) + " UTC";
  const number = (x) => (typeof x === "number" ? x.toFixed(2) : "");
  const userPath = (user) => "/v1/users/" + encodeURIComponent(user);

  /** An id for a write's idempotency (crypto.getRandomValues works outside secure
   * contexts too, unlike randomUUID). */
  function requestId() {
    const bytes = crypto.getRandomValues(new Uint8Array(12));
    return "console-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  /** Calls the API with the signed-in key; an error answer throws its code and message. */
  async function api(method, path, body) {
    const headers = { authorization: "Bearer " + (sessionStorage.getItem(KEY) || "") };
    const tenant = sessionStorage.getItem(TENANT);
    if (tenant) headers["x-engram-tenant"] = tenant;
    if (body !== undefined) headers["content-type"] = "application/json";
    let response;
    try {
      response = await fetch(path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        cache: "no-store",
        credentials: "omit",
        referrerPolicy: "no-referrer",
      });
    } catch (err) {
      throw new ApiError(0, "network", "the node did not answer: " + err.message);
    }
    let data = null;
    try {
      data = await response.json();
    } catch (_) {
      data = null;
    }
    if (!response.ok) {
      const code = (data && (data.error || data.code)) || "http_" + response.status;
      const message = (data && data.message) || response.statusText;
      throw new ApiError(response.status, String(code), String(message));
    }
    return data;
  }

  function showError(err) {
    const box = $("error");
    box.replaceChildren();
    if (!err) {
      box.hidden = true;
      return;
    }
    const status = err.status ? err.status + " " : "";
    box.append(
      el("strong", { class: "code" }, status + (err.code || "error")),
      ": ",
      el("span", { class: "message" }, err.message || String(err)),
    );
    box.hidden = false;
  }

  function notice(text) {
    const box = $("notice");
    box.textContent = text || "";
    box.hidden = !text;
  }

  /** Runs `work`, showing its error in the page (a 401 signs out: the key stopped working). */
  async function guarded(work) {
    try {
      showError(null);
      return await work();
    } catch (err) {
      showError(err);
      if (err.status === 401) signOut(false);
      return undefined;
    }
  }

  // ---- Sign in and out ----

  async function signIn(key, tenant) {
    sessionStorage.setItem(KEY, key);
    if (tenant) sessionStorage.setItem(TENANT, tenant);
    else sessionStorage.removeItem(TENANT);
    let role = null;
    try {
      await api("GET", "/v1/admin/users?limit=1");
      role = "admin";
    } catch (err) {
      if (err.status !== 403) throw err;
    }
    if (!role) {
      try {
        await api("GET", "/v1/cluster/status");
        role = "operator";
      } catch (err) {
        if (err.status !== 403) throw err;
      }
    }
    if (!role) {
      throw new ApiError(
        403,
        "forbidden",
        "this key may neither list the tenant's users nor see the cluster: the console " +
          "needs an admin key or an operator key",
      );
    }
    sessionStorage.setItem(ROLE, role);
    return role;
  }

  function signOut(clearError) {
    sessionStorage.removeItem(KEY);
    sessionStorage.removeItem(TENANT);
    sessionStorage.removeItem(ROLE);
    if (clearError !== false) showError(null);
    notice("");
    render();
  }

  function chrome() {
    const role = sessionStorage.getItem(ROLE);
    const signedIn = Boolean(sessionStorage.getItem(KEY) && role);
    $("sign-in").hidden = signedIn;
    $("view").hidden = !signedIn;
    $("nav").hidden = !signedIn;
    $("who").hidden = !signedIn;
    if (signedIn) {
      const tenant = sessionStorage.getItem(TENANT);
      $("who-text").textContent =
        "Signed in with an " + role + " key" + (tenant ? " for tenant " + tenant : "");
      $("nav-users").hidden = role !== "admin";
      $("nav-audit").hidden = role !== "admin";
    } else {
      $("key").value = "";
    }
    return signedIn ? role : null;
  }

  // ---- Views ----

  function route() {
    const hash = location.hash.replace(/^#/, "");
    const [path, query] = hash.split("?");
    const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
    return { parts, query: new URLSearchParams(query || "") };
  }

  async function render() {
    const role = chrome();
    if (!role) return;
    const { parts, query } = route();
    const view = $("view");
    let page = parts[0] || (role === "admin" ? "users" : "cluster");
    if (role !== "admin" && page !== "cluster") page = "cluster";
    for (const link of document.querySelectorAll("nav a")) {
      link.classList.toggle("current", link.id === "nav-" + page);
    }
    if (page === "users" && parts.length > 1) return userView(view, parts[1]);
    if (page === "users") return usersView(view, query.get("after"));
    if (page === "audit") return auditView(view);
    return clusterView(view);
  }

  async function usersView(view, after) {
    view.replaceChildren(el("h2", null, "Users"), el("p", { class: "loading" }, "Loading…"));
    const path = "/v1/admin/users?limit=50" + (after ? "&after=" + encodeURIComponent(after) : "");
    const page = await guarded(() => api("GET", path));
    if (!page) return;
    const rows = page.users.map((u) =>
      el(
        "tr",
        { "data-user": u.user_id },
        el("td", null, el("a", { href: "#/users/" + encodeURIComponent(u.user_id) }, u.user_id)),
      ),
    );
    const pager = el("p", { class: "pager" });
    if (after) pager.append(el("a", { href: "#/users" }, "First page"), " ");
    if (page.next_after) {
      const next = "#/users?after=" + encodeURIComponent(page.next_after);
      pager.append(el("a", { id: "users-next", href: next }, "Next page"));
    }
    view.replaceChildren(
      el("h2", null, "Users"),
      el("p", { class: "note" }, "The tenant's users holding any data, by id."),
      page.users.length
        ? table(["User"], rows, { id: "users", class: "compact" })
        : el("p", { class: "empty" }, "No users."),
      pager,
    );
  }

  async function userView(view, user) {
    const audit = () => {
      auditFilters.user = user;
    };
    view.replaceChildren(
      el(
        "p",
        { class: "pager" },
        el("a", { href: "#/users" }, "← Users"),
        el("a", { id: "user-audit", href: "#/audit", onclick: audit }, "Audit trail of this user"),
      ),
      el("h2", null, "User ", el("span", { class: "id" }, user)),
      el("section", { id: "sessions" }, el("h3", null, "Sessions"), el("p", { class: "loading" }, "Loading…")),
      el("section", { id: "memories" }, el("h3", null, "Memories"), el("p", { class: "loading" }, "Loading…")),
      el("section", { id: "conflicts" }, el("h3", null, "Flagged conflicts"), el("p", { class: "loading" }, "Loading…")),
    );
    await guarded(async () => {
      const [sessions, memories, conflicts] = await Promise.all([
        api("GET", userPath(user) + "/sessions"),
        api("GET", userPath(user) + "/memories"),
        api("GET", userPath(user) + "/conflicts"),
      ]);
      renderSessions(user, sessions.sessions);
      renderMemories(user, memories.memories);
      renderConflicts(user, conflicts.conflicts, memories.memories);
    });
  }

  async function reloadMemories(user) {
    const [memories, conflicts] = await Promise.all([
      api("GET", userPath(user) + "/memories"),
      api("GET", userPath(user) + "/conflicts"),
    ]);
    renderMemories(user, memories.memories);
    renderConflicts(user, conflicts.conflicts, memories.memories);
  }

  function renderSessions(user, sessions) {
    const section = $("sessions");
    const turns = el("div", { id: "turns" });
    const rows = sessions.map((s) =>
      el(
        "tr",
        { "data-session": s.session_id },
        el("td", { class: "id" }, s.session_id),
        el("td", null, s.title || ""),
        el("td", { class: "num" }, String(s.turn_count * 2)),
        el("td", { class: "time" }, time(s.opened_at)),
        el("td", { class: "time" }, time(s.last_turn_at)),
        el(
          "td",
          null,
          el("button", { type: "button", onclick: () => showTurns(user, s.session_id, turns) }, "Turns"),
        ),
      ),
    );
    section.replaceChildren(
      el("h3", null, "Sessions"),
      sessions.length
        ? table(["Session", "Title", "Messages", "Opened", "Last activity", ""], rows, {
            id: "sessions-table",
          })
        : el("p", { class: "empty" }, "No sessions."),
      turns,
    );
  }

  async function showTurns(user, session, box) {
    const path = userPath(user) + "/sessions/" + encodeURIComponent(session) + "/memory?limit=50";
    const memory = await guarded(() => api("GET", path));
    if (!memory) return;
    const rows = memory.turns.map((t) =>
      el(
        "tr",
        null,
        el("td", { class: "num" }, String(t.seq)),
        el("td", { class: "time" }, time(t.created_at)),
        el("td", { class: "text" }, t.user_text),
        el("td", { class: "text" }, t.assistant_text),
        el("td", null, (t.entities || []).map((e) => el("span", { class: "tag" }, e))),
      ),
    );
    box.replaceChildren(
      el("h4", null, "Turns of ", el("span", { class: "id" }, session), " (newest 50)"),
      table(["#", "At", "User", "Assistant", "Entities"], rows, { id: "turns-table" }),
    );
  }

  function renderMemories(user, memories) {
    const rows = memories.map((m) => {
      const actions = el("td", { class: "actions" });
      if (m.status === "active" || m.status === "candidate") {
        actions.append(
          el("button", { type: "button", class: "suppress", onclick: () => setStatus(user, m, "suppressed") }, "Suppress"),
        );
      }
      if (m.status === "suppressed" || m.status === "candidate") {
        actions.append(
          el("button", { type: "button", class: "activate", onclick: () => setStatus(user, m, "active") }, "Activate"),
        );
      }
      return el(
        "tr",
        { "data-memory": m.memory_id },
        el("td", { class: "id" }, m.memory_id),
        el("td", null, m.kind),
        el("td", { class: "status status-" + m.status }, m.status),
        el("td", { class: "num" }, number(m.confidence)),
        el("td", { class: "num" }, number(m.salience)),
        el("td", { class: "pii pii-" + m.pii_level }, m.pii_level),
        el("td", { class: "text" }, m.text),
        el("td", null, (m.entities || []).map((e) => el("span", { class: "tag" }, e))),
        el("td", { class: "time" }, time(m.last_seen_at)),
        actions,
      );
    });
    $("memories").replaceChildren(
      el("h3", null, "Memories"),
      memories.length
        ? table(
            ["Memory", "Kind", "Status", "Confidence", "Salience", "Personal data", "Text", "Entities", "Last seen", ""],
            rows,
            { id: "memories-table" },
          )
        : el("p", { class: "empty" }, "No memories."),
    );
  }

  async function setStatus(user, memory, status) {
    const path = userPath(user) + "/memories/" + encodeURIComponent(memory.memory_id) + "/status";
    const done = await guarded(async () => {
      await api("POST", path, { request_id: requestId(), status });
      await reloadMemories(user);
      return true;
    });
    if (done) notice("Memory " + memory.memory_id + " is now " + status + ".");
  }

  function renderConflicts(user, conflicts, memories) {
    const text = (id) => {
      const found = memories.find((m) => m.memory_id === id);
      return el("td", null, el("span", { class: "id" }, id), found ? el("div", { class: "text" }, found.text) : null);
    };
    const rows = conflicts.map((c) =>
      el(
        "tr",
        { "data-flag": c.flag_id },
        el("td", { class: "id" }, c.flag_id),
        text(c.memory_id),
        text(c.conflicts_with),
        el("td", null, c.reason),
        el("td", { class: "time" }, time(c.created_at)),
        el(
          "td",
          { class: "actions" },
          [
            ["keep_old", "Keep old"],
            ["keep_new", "Keep new"],
            ["keep_both", "Keep both"],
          ].map(([resolution, label]) =>
            el("button", { type: "button", class: resolution, onclick: () => resolve(user, c, resolution) }, label),
          ),
        ),
      ),
    );
    $("conflicts").replaceChildren(
      el("h3", null, "Flagged conflicts"),
      conflicts.length
        ? table(["Flag", "New memory (held back)", "Contradicts", "Reason", "Flagged", ""], rows, {
            id: "conflicts-table",
          })
        : el("p", { class: "empty", id: "no-conflicts" }, "No flagged conflicts."),
    );
  }

  async function resolve(user, conflict, resolution) {
    const path = userPath(user) + "/conflicts/" + encodeURIComponent(conflict.flag_id) + "/resolve";
    const done = await guarded(async () => {
      await api("POST", path, { request_id: requestId(), resolution });
      await reloadMemories(user);
      return true;
    });
    if (done) notice("Conflict " + conflict.flag_id + " resolved: " + resolution.replace("_", " ") + ".");
  }

  // The audit view's filters survive moving between views (not reloads).
  const auditFilters = { user: "", principal: "", action: "", from: "", to: "", limit: "100" };

  function auditView(view) {
    const input = (name, label, type, extra) =>
      el(
        "label",
        null,
        label,
        el("input", Object.assign({ id: "audit-" + name, type, value: auditFilters[name] }, extra || {})),
      );
    const results = el("div", { id: "audit-results" });
    const form = el(
      "form",
      { id: "audit-form", class: "filters", autocomplete: "off" },
      input("user", "User id", "text"),
      input("principal", "Key id", "text"),
      input("action", "Action", "text", { placeholder: "e.g. memory.status" }),
      input("from", "From (UTC)", "datetime-local"),
      input("to", "To (UTC)", "datetime-local"),
      input("limit", "Limit", "number", { min: "1", max: "1000" }),
      el("button", { id: "audit-apply", type: "submit" }, "Apply"),
    );
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      for (const name of Object.keys(auditFilters)) auditFilters[name] = $("audit-" + name).value.trim();
      loadAudit(results, null);
    });
    view.replaceChildren(
      el("h2", null, "Audit trail"),
      el(
        "p",
        { class: "note" },
        "Oldest first. Users are named by a keyed pseudonym; filter by a user id to find theirs.",
      ),
      form,
      results,
    );
    loadAudit(results, null);
  }

  const utcMs = (local) => (local ? Date.parse(local + "Z") : NaN);

  async function loadAudit(box, from) {
    const query = new URLSearchParams();
    for (const name of ["user", "principal", "action", "limit"]) {
      if (auditFilters[name]) query.set(name, auditFilters[name]);
    }
    const start = from !== null ? from : utcMs(auditFilters.from);
    if (!Number.isNaN(start)) query.set("from", String(start));
    const end = utcMs(auditFilters.to);
    if (!Number.isNaN(end)) query.set("to", String(end));
    box.replaceChildren(el("p", { class: "loading" }, "Loading…"));
    const page = await guarded(() => api("GET", "/v1/admin/audit?" + query.toString()));
    if (!page) {
      box.replaceChildren();
      return;
    }
    const rows = page.entries.map((e) =>
      el(
        "tr",
        { "data-action": e.action },
        el("td", { class: "time" }, time(e.at)),
        el("td", { class: "id" }, e.principal),
        el("td", { class: "action" }, e.action),
        el("td", { class: "id", title: e.user || "" }, e.user ? e.user.slice(0, 12) + "…" : ""),
        el("td", { class: "id" }, e.ids.join(" ")),
        el("td", null, e.client || ""),
        el("td", { class: "num outcome" }, String(e.outcome)),
      ),
    );
    const pager = el("p", { class: "pager" });
    if (page.next_from !== null && page.next_from !== undefined) {
      pager.append(
        el("button", { id: "audit-next", type: "button", onclick: () => loadAudit(box, page.next_from) }, "Next page"),
      );
    }
    box.replaceChildren(
      page.entries.length
        ? table(["At", "Key", "Action", "User (pseudonym)", "Ids", "Client", "Outcome"], rows, {
            id: "audit-table",
          })
        : el("p", { class: "empty" }, "No entries."),
      pager,
    );
  }

  async function clusterView(view) {
    view.replaceChildren(el("h2", null, "Cluster"), el("p", { class: "loading" }, "Loading…"));
    const found = await guarded(() =>
      Promise.all([api("GET", "/v1/cluster/status"), api("GET", "/v1/cluster/pipeline")]),
    );
    if (!found) {
      view.replaceChildren(el("h2", null, "Cluster"));
      return;
    }
    const [status, pipeline] = found;
    const members = new Map(status.members.map((m) => [m.node_id, m]));
    const memberRows = status.members.map((m) =>
      el(
        "tr",
        { "data-node": m.node_id },
        el("td", { class: "id" }, m.node_id),
        el("td", null, m.http_addr),
        el("td", null, m.status),
        el("td", { class: m.live ? "live" : "dead" }, m.live ? "live" : "presumed dead"),
        el("td", { class: "num" }, (m.heartbeat_age_ms / 1000).toFixed(1) + " s"),
        el("td", { class: "num" }, String(m.shards)),
      ),
    );
    // Hand-offs in progress, as the lease rows show them: a shard released and not yet
    // taken, one held by a draining node (to be handed off), one held by a node presumed
    // dead (to be taken over).
    const moving = { released: [], draining: [], dead: [] };
    const epochs = new Map();
    for (const lease of status.leases) {
      const owner = lease.owner ? members.get(lease.owner) : null;
      if (!lease.owner) moving.released.push(lease.shard);
      else if (owner && owner.status === "draining") moving.draining.push(lease.shard);
      else if (!owner || !owner.live) moving.dead.push(lease.shard);
      const key = lease.owner || "(none)";
      const range = epochs.get(key) || { shards: 0, min: Infinity, max: -Infinity };
      range.shards += 1;
      range.min = Math.min(range.min, lease.epoch);
      range.max = Math.max(range.max, lease.epoch);
      epochs.set(key, range);
    }
    const shardList = (shards) =>
      shards.length ? shards.slice(0, 20).join(", ") + (shards.length > 20 ? ", …" : "") : "";
    const movingRows = [
      ["Released, not yet taken", moving.released],
      ["On draining nodes (being handed off)", moving.draining],
      ["On nodes presumed dead (to be taken over)", moving.dead],
    ].map(([what, shards]) =>
      el("tr", null, el("td", null, what), el("td", { class: "num" }, String(shards.length)), el("td", null, shardList(shards))),
    );
    const epochRows = Array.from(epochs, ([owner, r]) =>
      el(
        "tr",
        null,
        el("td", { class: "id" }, owner),
        el("td", { class: "num" }, String(r.shards)),
        el("td", { class: "num" }, r.min === r.max ? String(r.min) : r.min + "–" + r.max),
      ),
    );
    const leaseRows = status.leases.map((l) =>
      el(
        "tr",
        null,
        el("td", { class: "num" }, String(l.shard)),
        el("td", { class: "id" }, l.owner || ""),
        el("td", { class: "num" }, String(l.epoch)),
      ),
    );
    const age = (pipeline.oldest_pending_age_ms / 1000).toFixed(1) + " s";
    const pipelineRows = [
      ["Pipeline", pipeline.enabled ? "enabled" : "disabled (inference off)"],
      ["Users with pending entries", String(pipeline.pending_users)],
      ["Pending entries", String(pipeline.pending_entries)],
      ["Oldest pending", age],
      ["Stored since start", String(pipeline.stored)],
      ["Dropped since start", String(pipeline.dropped)],
    ].map(([k, v]) => el("tr", null, el("th", { scope: "row" }, k), el("td", null, v)));
    view.replaceChildren(
      el("h2", null, "Cluster"),
      el(
        "p",
        null,
        "This page is served by node ",
        el("span", { class: "id" }, status.node || "(single node)"),
        ", which holds " + status.held + " of " + status.shards + " shards.",
      ),
      el("h3", null, "Members"),
      table(["Node", "HTTP address", "Status", "Liveness", "Heartbeat age", "Shards"], memberRows, {
        id: "members-table",
        class: "compact",
      }),
      el("h3", null, "Hand-offs in progress"),
      table(["Shards", "Count", "Which"], movingRows, { id: "moving-table", class: "compact" }),
      el("h3", null, "Lease epochs"),
      table(["Owner", "Shards", "Epochs"], epochRows, { id: "epochs-table", class: "compact" }),
      el(
        "details",
        null,
        el("summary", null, "Every lease (" + status.leases.length + ")"),
        table(["Shard", "Owner", "Epoch"], leaseRows, { id: "leases-table" }),
      ),
      el("h3", null, "Pending inference on ", el("span", { class: "id" }, pipeline.node || "this node")),
      el("table", { id: "pipeline-table", class: "facts compact" }, el("tbody", null, pipelineRows)),
    );
  }

  // ---- Start ----

  function start() {
    $("sign-in-form").addEventListener("submit", async (event) => {
      event.preventDefault();
      const key = $("key").value.trim();
      const tenant = $("tenant").value.trim();
      $("key").value = "";
      const role = await guarded(() => signIn(key, tenant));
      if (!role) {
        sessionStorage.removeItem(KEY);
        sessionStorage.removeItem(TENANT);
        sessionStorage.removeItem(ROLE);
        chrome();
        return;
      }
      const target = role === "admin" ? "#/users" : "#/cluster";
      if (location.hash === target) render();
      else location.hash = target;
    });
    $("sign-out").addEventListener("click", () => signOut(true));
    window.addEventListener("hashchange", () => {
      notice("");
      render();
    });
    render();
  }

  start();
})();
