"""``opdsl report RUN``: one self-contained HTML page that shows a run at a glance.

Everything is inlined (style, script, data): the page opens from a file, offline, in any
browser. The run's data travels as JSON inside a ``<script type="application/json">`` tag
with every ``<`` escaped, and the page puts it on screen with ``textContent`` only, so text a
model or a tool wrote can never become markup or script. What the journal holds is already
redacted; the page shows nothing else.

Its Content-Security-Policy (:data:`CSP`) loads nothing and runs only the page's own script,
named by its SHA-256 hash: no other inline script, no event-handler attribute and no
``javascript:`` URL can run, whatever reached the page. A link (to the parent of a fork) is
made only from a run id that matches :data:`RUN_ID`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any

from pydantic import ValidationError

from interpreters.journal._base import Attempt, Entry, RunRecord
from interpreters.journal._checkpoint import CheckpointSnapshot
from interpreters.journal._content import ContentError, Reader
from interpreters.runtime._totals import Totals
from op import Agent, Ask, Checkpoint, Infer, Limit, Par, Tool, Usage
from op.effects import SCOPE_KINDS
from state._canonical import lone_escaped

__all__ = ["CSP", "RUN_ID", "render_report", "report_data"]

RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
"""The run ids a page links to (as ``ID.html``, next to the page): letters, digits, ``.``,
``_`` and ``-``; no ``:``, so no scheme, and no ``/``."""

#: a longer string is cut in the page (the journal keeps it whole)
MAX_TEXT = 20_000


def _cut(value: Any) -> Any:
    if isinstance(value, str):
        if len(value) <= MAX_TEXT:
            return value
        return (
            value[:MAX_TEXT] + f"\n[... {len(value) - MAX_TEXT:,} more characters in the journal]"
        )
    if isinstance(value, list):
        return [_cut(v) for v in value]
    if isinstance(value, dict):
        return {k: _cut(v) for k, v in value.items()}
    return value


def _usage(text: str | None) -> Usage | None:
    """An entry's usage; None for none, and for one that is not a usage (a journal changed
    outside opdsl: the entry is counted without it, as the run's totals count it)."""
    if not text:
        return None
    try:
        return Usage.model_validate_json(text)
    except ValidationError:
        return None


def _loads(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the stack
        return text


def _read(read: Callable[[], Any], text: str | None) -> Any:
    """What ``read`` gives, or ``text`` as it is when a piece it needs cannot be read."""
    try:
        return read()
    except (ContentError, ValueError):
        return _loads(text)


MODEL_CALL_KINDS = frozenset({Infer.kind, Agent.kind})
"""The kinds of the effects a budget counts as model calls (and that have a price)."""


def _inside(address: str, scope: str) -> bool:
    return address.startswith(scope + ".")


def _lane(address: str, pars: set[str]) -> str | None:
    """The branch of the innermost ``par`` an effect runs in, if any (``branch 2``)."""
    parts = address.split(".")
    for n in range(len(parts) - 1, 0, -1):
        if ".".join(parts[:n]) in pars:
            return f"branch {parts[n]}"
    return None


def _totals(scope: Entry, entries: Sequence[Entry]) -> dict[str, Any]:
    """What the effects inside a scope spent, and its budget if it is a ``limit``."""
    total = Usage()
    unknown = 0
    model_calls = tool_calls = 0
    for e in entries:
        if not _inside(e.address, scope.address):
            continue
        if e.kind in MODEL_CALL_KINDS:
            model_calls += 1
        elif e.kind == Tool.kind:
            tool_calls += 1
        usage = _usage(e.usage_json)
        if usage is not None:
            total = Usage(
                input_tokens=total.input_tokens + usage.input_tokens,
                output_tokens=total.output_tokens + usage.output_tokens,
                cached_tokens=total.cached_tokens + usage.cached_tokens,
                cost_usd=(total.cost_usd or 0.0) + (usage.cost_usd or 0.0),
            )
            if usage.cost_usd is None and e.kind in MODEL_CALL_KINDS:
                unknown += 1
    budget = None
    if scope.kind == Limit.kind:
        budget = (_loads(scope.effect_json) or {}).get("budget")
    return {
        "tokens": total.total_tokens,
        "cached_tokens": total.cached_tokens,
        "cost_usd": None if unknown else (total.cost_usd or 0.0),
        "cost_unknown_calls": unknown,
        "model_calls": model_calls,
        "tool_calls": tool_calls,
        "budget": budget,
    }


def report_data(
    run: RunRecord,
    entries: Sequence[Entry],
    content: Callable[[Iterable[str]], Mapping[str, str]] | None = None,
    *,
    attempts: Sequence[Attempt] = (),
    resumes: Sequence[float] = (),
) -> dict[str, Any]:
    """What the page shows, as plain data (the tests read it too). ``content``: the
    journal's pieces; each ``infer`` then shows the messages it added, once. ``attempts``:
    the earlier attempts of effects a resume began again, each a bar of its own before its
    effect's; ``resumes``: when the run was resumed, marks on the time axis."""
    from interpreters._durable import checkpoint_labels

    labels = {e.address: label for label, e in checkpoint_labels(list(entries))}
    reader = None if content is None else Reader(content)
    pars = {e.address for e in entries if e.kind == Par.kind}
    tries: dict[str, list[Attempt]] = {}
    for a in attempts:
        tries.setdefault(a.address, []).append(a)
    items: list[dict[str, Any]] = []
    for e in entries:
        usage = _usage(e.usage_json)
        result = (
            _loads(e.result_json)
            if reader is None
            else _read(partial(reader.result, e.kind, e.result_json), e.result_json)
        )
        if e.kind == Checkpoint.kind and isinstance(result, dict):
            try:
                snap = CheckpointSnapshot.from_json(result)
            except ValueError:  # a journal someone made by hand: its result as it is
                pass
            else:
                result = {"state": snap.state, "world": snap.world}
        item: dict[str, Any] = {
            "address": e.address,
            "kind": e.kind,
            "status": e.status,
            "started_at": e.started_at,
            "finished_at": e.finished_at,
            "effect": _loads(e.effect_json)
            if reader is None
            else _read(partial(reader.effect, e.kind, e.effect_json), e.effect_json),
            "result": result,
            "error": _loads(e.error_json),
            "tool_error": e.tool_failure(),
            "usage": None if usage is None else usage.model_dump(),
            "scope": e.kind in SCOPE_KINDS,
            "lane": _lane(e.address, pars),
        }
        if e.kind in SCOPE_KINDS:
            item["totals"] = _totals(e, entries)
        if e.address in labels:
            item["label"] = labels[e.address]
            item["command"] = f"opdsl resume {run.run_id} --from {labels[e.address]}"
        earlier = tries.get(e.address, [])
        if earlier:
            n = len(earlier) + 1
            items += [_attempt_item(a, item, k, n) for k, a in enumerate(earlier, 1)]
            item["attempt"], item["attempts"] = n, n
        items.append(item)
    asked = [
        (e.address, (_loads(e.effect_json) or {}).get("question"))
        for e in entries
        if e.kind == Ask.kind and e.status == "started"
    ]
    waiting = [q for _, q in asked]
    ends = [t for e in entries for t in (e.started_at, e.finished_at) if t]
    ends += [t for a in attempts for t in (a.started_at, a.again_at)] + list(resumes)
    totals = Totals.of_entries(entries)
    data: dict[str, Any] = _cut(
        {
            "run": {
                "run_id": run.run_id,
                "program": run.program,
                "status": run.status,
                "args": _loads(run.args_json),
                "created_at": run.created_at,
                "finished_at": run.finished_at,
                "parent_run": run.parent_run,
                "parent_link": _link(run.parent_run),
                "fork_checkpoint": run.fork_checkpoint,
                "result": _loads(run.result_json),
                "error": _loads(run.error_json),
                "final_state": _loads(run.final_state_json),
                "waiting_for": [q for q in waiting if q],
                "waiting_at": [[a, q] for a, q in asked if q],
            },
            "totals": {**totals.as_json(), "line": totals.line()},
            "start": min([run.created_at, *ends]) if run.created_at or ends else 0.0,
            "end": max([run.finished_at or 0.0, *ends, run.created_at]),
            "entries": items,
            "resumes": sorted(resumes),
        }
    )
    return data


def _attempt_item(a: Attempt, entry: dict[str, Any], k: int, n: int) -> dict[str, Any]:
    """Attempt ``k`` of ``n`` of an effect, the last being ``entry``: a bar from its start to
    its end, or, cut off by a crash or a stop, to when a resume began it again."""
    cut = a.status == "started"
    return {
        **entry,
        "status": "stopped" if cut else a.status,
        "started_at": a.started_at,
        "finished_at": a.finished_at if a.finished_at is not None else a.again_at,
        "result": None,
        "usage": None,
        "tool_error": None,
        "error": {
            "type": "stopped" if cut else a.status,
            "message": f"attempt {k} of {n}: "
            + ("the run stopped during it" if cut else f"it was {a.status}")
            + "; a resume began the effect again",
        },
        "attempt": k,
        "attempts": n,
    }


def _link(run_id: str | None) -> str | None:
    """The page of ``run_id`` next to this one, when the id is one a link may be made of."""
    return f"{run_id}.html" if run_id is not None and RUN_ID.fullmatch(run_id) else None


def render_report(
    run: RunRecord,
    entries: Sequence[Entry],
    content: Callable[[Iterable[str]], Mapping[str, str]] | None = None,
    *,
    attempts: Sequence[Attempt] = (),
    resumes: Sequence[float] = (),
) -> str:
    """The page for ``run``: HTML with its style, script and data inlined (``attempts`` and
    ``resumes``: see :func:`report_data`)."""
    found = report_data(run, entries, content, attempts=attempts, resumes=resumes)
    data = json.dumps(found, ensure_ascii=False, sort_keys=True)
    # inside <script>: no "</script>", no "<!--", whatever the run's text holds
    data = data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    title = f"opdsl run {run.run_id}"
    parts = {
        "TITLE": json.dumps(title)[1:-1].replace("&", "&amp;").replace("<", "&lt;"),
        "CSP": CSP,
        "STYLE": _STYLE,
        "DATA": data,
        "SCRIPT": _SCRIPT,
    }
    # one pass over the template: text that a part brings (a run's data) is never replaced
    page = re.sub(r"__([A-Z]+)__", lambda m: parts[m.group(1)], _PAGE)
    # a lone surrogate (no UTF-8 holds one; a journal from before opdsl refused them may) is
    # shown as its escape, which means the same in the page's JSON
    return lone_escaped(page)


_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="__CSP__">
<title>__TITLE__</title>
<style>__STYLE__</style>
</head>
<body>
<header id="head"></header>
<main>
  <section id="timeline" aria-label="timeline">
    <div id="axis"></div>
    <div id="rows"></div>
  </section>
  <aside id="detail" aria-label="detail"><p class="hint">Click an effect to see it.</p></aside>
</main>
<script type="application/json" id="run-data">__DATA__</script>
<script>__SCRIPT__</script>
</body>
</html>
"""

_STYLE = """
:root { --fg: #1d2330; --muted: #6b7385; --line: #e3e6ee; --bg: #fff; --accent: #3661d8;
  --ok: #2e9d5b; --bad: #c83232; --warn: #c98a12; --scope: #eef1fb; }
* { box-sizing: border-box; }
body { margin: 0; font: 13px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); background: var(--bg); }
header { padding: 12px 18px; border-bottom: 1px solid var(--line); }
header h1 { font-size: 16px; margin: 0 0 4px; }
header .meta { color: var(--muted); }
header .status-completed { color: var(--ok); font-weight: 600; }
header .status-failed, header .status-cancelled { color: var(--bad); font-weight: 600; }
header .status-waiting, header .status-running { color: var(--warn); font-weight: 600; }
header .question { margin-top: 6px; padding: 6px 10px; background: #fff6e0; border-left: 3px solid var(--warn); }
header a { color: var(--accent); }
main { display: grid; grid-template-columns: minmax(0, 3fr) minmax(280px, 2fr); min-height: calc(100vh - 70px); }
#timeline { border-right: 1px solid var(--line); overflow: auto; padding: 8px 0; }
#axis { position: relative; height: 22px; margin-left: 300px; margin-right: 12px; border-bottom: 1px solid var(--line); color: var(--muted); font-size: 11px; }
#axis span { position: absolute; transform: translateX(-50%); white-space: nowrap; }
#axis span:last-of-type { transform: translateX(-100%); }
#axis span:first-of-type { transform: none; }
.row { display: grid; grid-template-columns: 300px 1fr; align-items: center; min-height: 24px; cursor: pointer; border-bottom: 1px solid #f4f5f8; }
.row:hover, .row.selected { background: #f3f6ff; }
.label { white-space: nowrap; overflow: hidden; text-overflow: ellipsis; padding: 0 8px; font-family: ui-monospace, monospace; font-size: 12px; }
.label .addr { color: var(--muted); }
.lane { font-size: 10px; color: var(--accent); margin-right: 4px; }
.track { position: relative; height: 20px; margin-right: 12px; }
.bar { position: absolute; top: 4px; height: 12px; min-width: 2px; border-radius: 3px; background: var(--accent); opacity: .85; }
.bar.scope { top: 2px; height: 16px; background: var(--scope); border: 1px solid #b7c3ec; opacity: 1; }
.bar.failed, .bar.cancelled { background: var(--bad); }
.bar.started { background: var(--warn); }
.bar.stopped { background: repeating-linear-gradient(45deg, var(--bad), var(--bad) 3px, #f3c4c4 3px, #f3c4c4 6px); }
.resume { position: absolute; top: 0; bottom: 0; border-left: 2px dashed var(--warn); }
#axis .resume { color: var(--warn); padding-left: 3px; white-space: nowrap; }
.bar.tool { background: #6d4fc2; }
.bar.agent { background: #0f8a8a; }
.bar.tool-failed { background: var(--bad); }
.marker { position: absolute; top: 3px; width: 12px; height: 12px; transform: translateX(-6px) rotate(45deg); background: #b03ab0; }
.totals { color: var(--muted); font-size: 11px; margin-left: 6px; }
.track .totals { position: absolute; right: 0; top: 2px; background: rgba(255,255,255,.85); padding: 0 4px; }
.over { color: var(--bad); font-weight: 600; }
#detail { padding: 12px 16px; overflow: auto; max-height: calc(100vh - 70px); }
#detail h2 { font-size: 14px; margin: 0 0 6px; }
#detail h3 { font-size: 12px; margin: 12px 0 4px; color: var(--muted); text-transform: uppercase; letter-spacing: .04em; }
#detail pre { white-space: pre-wrap; word-break: break-word; background: #f7f8fb; padding: 8px; border-radius: 4px; margin: 0; font-size: 12px; }
#detail .error { color: var(--bad); background: #fdf0f0; }
#detail dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 10px; margin: 0; }
#detail dt { color: var(--muted); }
.msg { margin-bottom: 6px; }
.msg .role { font-weight: 600; font-size: 11px; color: var(--muted); }
.hint { color: var(--muted); }
"""

_SCRIPT = r"""
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("run-data").textContent);
  const run = data.run;
  const entries = data.entries;
  const span = Math.max(data.end - data.start, 1e-6);

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v;
      else if (k === "style") node.setAttribute("style", v);
      else node.setAttribute(k, v);
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }
  const pct = (t) => (100 * (t - data.start) / span).toFixed(3) + "%";
  const secs = (s) => (s === null || s === undefined) ? "" : (s < 1 ? (s * 1000).toFixed(0) + " ms" : s.toFixed(2) + " s");
  const money = (u) => (u === null || u === undefined) ? "unknown" : "$" + u.toFixed(4);
  const text = (v) => typeof v === "string" ? v : JSON.stringify(v, null, 2);

  // -- the header ------------------------------------------------------------------------
  const head = document.getElementById("head");
  head.append(el("h1", {}, "run " + run.run_id + " ", el("span", { class: "status-" + run.status }, run.status)));
  head.append(el("div", { class: "meta" }, run.program + "  ·  " + entries.length + " effects  ·  " +
    secs(data.end - data.start)));
  head.append(el("div", { class: "meta", id: "totals" }, data.totals.line +
    (data.totals.price_sources.length ? "  ·  priced by " + data.totals.price_sources.join("; ") : "")));
  if (run.parent_run) {
    head.append(el("div", { class: "meta", id: "fork" }, "forked from ",
      run.parent_link ? el("a", { href: run.parent_link }, run.parent_run) : run.parent_run,
      " at checkpoint " + (run.fork_checkpoint || "?")));
  }
  const asked = run.waiting_at || run.waiting_for.map((q) => ["", q]);
  for (const [at, q] of asked) {
    // with several questions open, opdsl answer needs to be told which
    const which = asked.length > 1 && at ? " --at " + at : "";
    head.append(el("div", { class: "question", id: "question" }, "waiting for an answer: " + q +
      "  —  opdsl answer " + run.run_id + which + " TEXT"));
  }
  if (run.error) {
    head.append(el("div", { class: "meta error-line" },
      el("span", { class: "status-failed" }, "error at address " + (run.error.address || "?") + ": "),
      (run.error.type || "") + ": " + (run.error.message || "")));
  }

  // -- the time axis ---------------------------------------------------------------------
  const axis = document.getElementById("axis");
  const resumes = data.resumes || [];
  for (const t of resumes) axis.append(el("div", { class: "resume", style: "left:" + pct(t), title: "resumed" }, "resumed"));
  if (resumes.length) head.append(el("div", { class: "meta", id: "resumes" }, "resumed " + resumes.length +
    (resumes.length === 1 ? " time" : " times") + " (the dashed lines)"));
  for (let i = 0; i <= 4; i++) {
    const t = data.start + span * i / 4;
    axis.append(el("span", { style: "left:" + (25 * i) + "%" }, secs(t - data.start)));
  }

  // -- the rows: one per effect, in address order, scopes around their bodies ------------
  const rows = document.getElementById("rows");
  const key = (a) => a.split(".").map(Number);
  const ordered = entries.map((e, i) => [e, i]).sort((x, y) => {
    const a = key(x[0].address), b = key(y[0].address);
    for (let i = 0; i < Math.min(a.length, b.length); i++) if (a[i] !== b[i]) return a[i] - b[i];
    return a.length - b.length;
  });
  function what(e) {
    const f = e.effect || {};
    if (e.kind === "tool") return f.name || "";
    if (e.kind === "infer") {
      const m = f.messages || [];
      return m.length ? String(m[m.length - 1].content || "").slice(0, 60) : "";
    }
    if (e.kind === "agent") return (f.backend || "") + " " + String(f.prompt || "").slice(0, 40);
    if (e.kind === "checkpoint" || e.kind === "emit") return f.name || "";
    if (e.kind === "ask") return f.question || "";
    if (e.kind === "limit") return "budget";
    if (e.kind === "timeout") return (f.seconds || "") + " s";
    return "";
  }
  function totals(t) {
    if (!t) return null;
    const b = t.budget || {};
    const part = (name, spent, limit, fmt) => {
      const shown = fmt ? fmt(spent) : String(spent);
      if (limit === null || limit === undefined) return name + " " + shown;
      return name + " " + shown + "/" + (fmt ? fmt(limit) : limit);
    };
    const over = (b.tokens != null && t.tokens > b.tokens) || (b.model_calls != null && t.model_calls > b.model_calls) ||
      (b.tool_calls != null && t.tool_calls > b.tool_calls);
    const parts = [];
    if (t.tokens || b.tokens != null) {
      parts.push(part("tokens", t.tokens, b.tokens) + (t.cached_tokens ? " (" + t.cached_tokens + " cached)" : ""));
    }
    if (t.model_calls || b.usd != null) parts.push("cost " + money(t.cost_usd) + (b.usd != null ? "/" + money(b.usd) : ""));
    if (t.model_calls || b.model_calls != null) parts.push(part("model", t.model_calls, b.model_calls));
    if (t.tool_calls || b.tool_calls != null) parts.push(part("tools", t.tool_calls, b.tool_calls));
    return el("span", { class: "totals" + (over ? " over" : "") }, parts.join(" · "));
  }
  ordered.forEach(([e, i]) => {
    const depth = e.address.split(".").length - 1;
    const branch = e.lane;
    const label = el("div", { class: "label", style: "padding-left:" + (8 + 14 * depth) + "px" },
      branch ? el("span", { class: "lane" }, branch) : null,
      el("span", { class: "addr" }, e.address + " "), e.kind + " ", what(e),
      e.attempts ? el("span", { class: "attempt" }, " (attempt " + e.attempt + " of " + e.attempts + ")") : null);
    const track = el("div", { class: "track" });
    for (const t of resumes) track.append(el("div", { class: "resume", style: "left:" + pct(t) }));
    const end = e.finished_at || data.end;
    if (e.kind === "checkpoint") {
      track.append(el("div", { class: "marker", style: "left:" + pct(e.started_at), title: e.command || "" }));
      track.append(el("span", { class: "totals", style: "position:absolute;left:calc(" + pct(e.started_at) + " + 10px)" },
        e.command || ""));
    } else {
      const scope = e.scope;
      const cls = ["bar", e.kind, e.status, scope ? "scope" : "", e.tool_error ? "tool-failed" : ""].join(" ");
      track.append(el("div", { class: cls, style: "left:" + pct(e.started_at) + ";width:calc(" + pct(end) + " - " + pct(e.started_at) + ")" }));
      if (scope) track.append(totals(e.totals));
    }
    const row = el("div", { class: "row", "data-address": e.address, "data-kind": e.kind, tabindex: "0" }, label, track);
    row.addEventListener("click", () => show(e, row));
    row.addEventListener("keydown", (ev) => { if (ev.key === "Enter") show(e, row); });
    rows.append(row);
  });

  // -- the detail of one effect ----------------------------------------------------------
  const detail = document.getElementById("detail");
  function block(title, value, cls) {
    if (value === null || value === undefined || value === "") return null;
    return el("div", {}, el("h3", {}, title), el("pre", { class: cls || "" }, text(value)));
  }
  function messages(list) {
    return el("div", {}, el("h3", {}, "prompt"), ...(list || []).map((m) =>
      el("div", { class: "msg" }, el("div", { class: "role" }, m.role + (m.tool_call_id ? " (" + m.tool_call_id + ")" : "")),
        el("pre", {}, text(m.content || "") + (m.tool_calls && m.tool_calls.length ? "\n" + text(m.tool_calls) : "")))));
  }
  function show(e, row) {
    for (const r of rows.querySelectorAll(".row.selected")) r.classList.remove("selected");
    row.classList.add("selected");
    detail.replaceChildren();
    const f = e.effect || {};
    const u = e.usage;
    detail.append(el("h2", {}, e.kind + " at " + e.address));
    const facts = el("dl", {},
      el("dt", {}, "status"), el("dd", {}, e.tool_error ? "failed (tool)" : e.status),
      el("dt", {}, "duration"), el("dd", {}, e.finished_at ? secs(e.finished_at - e.started_at) : "unfinished"));
    if (e.attempts) facts.append(el("dt", {}, "attempt"), el("dd", {}, e.attempt + " of " + e.attempts));
    if (u) {
      facts.append(el("dt", {}, "tokens"), el("dd", {}, u.input_tokens + " in, " + u.output_tokens + " out" +
        (u.cached_tokens ? ", " + u.cached_tokens + " cached" : "")));
      facts.append(el("dt", {}, "cost"), el("dd", {}, money(u.cost_usd)));
    }
    if (e.command) facts.append(el("dt", {}, "fork"), el("dd", {}, e.command));
    detail.append(facts);
    if (e.kind === "infer") {
      detail.append(messages(f.messages));
      const r = e.result || {};
      detail.append(block("response", r.text));
      if (r.tool_calls && r.tool_calls.length) detail.append(block("tool calls", r.tool_calls));
      if (r.stop_reason) detail.append(block("stop reason", r.stop_reason));
    } else if (e.kind === "tool") {
      detail.append(block("tool", f.name), block("arguments", f.args));
      const r = e.result || {};
      detail.append(block("output", r.output));
      if (e.tool_error) detail.append(block("error", e.tool_error, "error"));
    } else if (e.kind === "agent") {
      detail.append(block("backend", f.backend), block("prompt", f.prompt));
      const r = e.result || {};
      detail.append(block("answer", r.text), block("tool calls", (r.tool_calls || []).length ? r.tool_calls : null));
    } else if (e.scope) {
      detail.append(block("spent inside", e.totals), block("effect", f), block("outcome", e.result));
    } else {
      detail.append(block("effect", f), block("result", e.result));
    }
    if (e.error) detail.append(block("error", (e.error.type || "") + ": " + (e.error.message || text(e.error)), "error"));
  }
})();
"""

CSP = (
    "default-src 'none'; "
    f"script-src 'sha256-{base64.b64encode(hashlib.sha256(_SCRIPT.encode()).digest()).decode()}'; "
    "style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
)
"""The page's Content-Security-Policy: nothing is loaded; the one script that runs is the
page's own (its hash); styles may be inline (the page sets positions as style attributes)."""
