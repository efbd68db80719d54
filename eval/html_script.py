"""The HTML report's script (html_report.py puts it inline, its hash in the page's policy).

It reads the document from ``#stb-data`` (and the source colours from ``#stb-colors``),
keeps the queries as an array it filters and sorts, and shows one page of rows at a time;
a row opens its trajectory below it. It builds every node with ``createElement`` and
``textContent``: no text of the data is ever parsed as HTML.
"""

SCRIPT = r"""
(function () {
  "use strict";
  var PAGE_SIZE = 100;
  var ANSWER_LIMIT = 400;
  var TEXT_LIMIT = 900;
  var STATUS = {solved: "\u2713", unsolved: "\u2717", unsure: "?", unscored: "\u2013", missing: "\u2013"};

  function byId(id) { return document.getElementById(id); }
  function isObj(x) { return x !== null && typeof x === "object" && !Array.isArray(x); }
  function arr(x) { return Array.isArray(x) ? x : []; }
  function str(x) { return x === null || x === undefined ? "" : String(x); }
  function num(x) { return typeof x === "number" && isFinite(x) ? x : null; }
  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = text;
    return node;
  }
  function readJSON(id) {
    var node = byId(id);
    if (!node) return null;
    try { return JSON.parse(node.textContent); } catch (err) { return null; }
  }

  var doc = readJSON("stb-data");
  var colors = readJSON("stb-colors") || {};
  var broken = !isObj(doc);
  if (broken) doc = {};
  var runs = arr(doc.runs);
  var main = isObj(runs[0]) ? runs[0] : {};
  var UNIT = main.status_of === "trials" ? "trial " : "round ";  // what each status pill stands for
  var hasBaseline = isObj(doc.baseline);
  var KNOWN = ["upstream", "cache", "simulated", "injected", "error", "imported"];
  var collator = new Intl.Collator(undefined, {numeric: true, sensitivity: "base"});

  function sourceRank(name) { var i = KNOWN.indexOf(name); return i < 0 ? KNOWN.length : i; }
  function sortSources(names) {
    return names.slice().sort(function (a, b) { return sourceRank(a) - sourceRank(b) || collator.compare(a, b); });
  }
  function countSteps(trajectory) {
    var counts = {};
    trajectory.forEach(function (step) {
      if (isObj(step) && step.source) counts[str(step.source)] = (counts[str(step.source)] || 0) + 1;
    });
    return counts;
  }
  function sameList(a, b) {
    if (a.length !== b.length) return false;
    for (var i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
    return true;
  }
  function changesOf(query, status, steps, base) {
    if (Array.isArray(base.changed)) return base.changed.map(str);
    var out = [];
    if (!sameList(status, arr(base.status).map(str))) out.push("status");
    if (num(base.steps) !== null && base.steps !== steps) out.push("steps");
    if (arr(base.changed_steps).length) out.push("answers");
    return out;
  }

  var items = arr(main.queries).filter(isObj).map(function (q, index) {
    var status = arr(q.status).map(str);
    var trajectory = arr(q.trajectory);
    var sources = isObj(q.sources) ? q.sources : countSteps(trajectory);
    var steps = num(q.steps);
    var base = hasBaseline && isObj(q.baseline) ? q.baseline : null;
    var changed = base ? changesOf(q, status, steps, base) : [];
    var calls = 0;
    Object.keys(sources).forEach(function (k) { calls += num(sources[k]) || 0; });
    return {
      q: q, index: index, id: str(q.id), status: status, steps: steps, sources: sources, calls: calls,
      trajectory: trajectory, base: base, changed: changed,
      search: (str(q.id) + "\n" + str(q.query)).toLowerCase(),
      solvedAny: status.indexOf("solved") >= 0,
      solvedAll: status.length > 0 && status.every(function (s) { return s === "solved"; }),
      unsolvedAll: status.length > 0 && status.every(function (s) { return s === "unsolved"; }),
      unsure: status.indexOf("unsure") >= 0,
      unscored: status.some(function (s) { return s === "unscored" || s === "missing"; })
    };
  });

  var STATUS_TESTS = {
    "all": function () { return true; },
    "solved-any": function (it) { return it.solvedAny; },
    "solved-all": function (it) { return it.solvedAll; },
    "unsolved-all": function (it) { return it.unsolvedAll; },
    "unsure": function (it) { return it.unsure; },
    "unscored": function (it) { return it.unscored; },
    "changed": function (it) { return it.changed.length > 0; }
  };
  function byIdOrder(a, b) { return collator.compare(a.id, b.id) || a.index - b.index; }
  function stepsOf(it, missing) { return it.steps === null ? missing : it.steps; }
  var SORTS = {
    "id-asc": byIdOrder,
    "id-desc": function (a, b) { return byIdOrder(b, a); },
    "steps-asc": function (a, b) { return stepsOf(a, Infinity) - stepsOf(b, Infinity) || byIdOrder(a, b); },
    "steps-desc": function (a, b) { return stepsOf(b, -Infinity) - stepsOf(a, -Infinity) || byIdOrder(a, b); }
  };
  var sorted = {};
  function order(name) {
    if (!SORTS[name]) name = "id-asc";
    if (!sorted[name]) sorted[name] = items.slice().sort(SORTS[name]);
    return sorted[name];
  }

  var controls = {
    search: byId("search"), status: byId("filter-status"), source: byId("filter-source"), sort: byId("sort"),
    reset: byId("reset"), prev: byId("prev-page"), next: byId("next-page"), count: byId("count"),
    pageLabel: byId("page-label"), rows: byId("rows")
  };
  var state = {shown: [], page: 0, open: null};

  function filter() {
    var words = str(controls.search && controls.search.value).toLowerCase().split(/\s+/).filter(Boolean);
    var test = STATUS_TESTS[controls.status ? controls.status.value : "all"] || STATUS_TESTS.all;
    var source = controls.source ? controls.source.value : "";
    state.shown = order(controls.sort ? controls.sort.value : "id-asc").filter(function (it) {
      if (!test(it)) return false;
      if (source === "none") { if (it.calls > 0) return false; }
      else if (source && !((num(it.sources[source]) || 0) > 0)) return false;
      for (var i = 0; i < words.length; i++) if (it.search.indexOf(words[i]) < 0) return false;
      return true;
    });
    state.page = 0;
    render();
  }

  function pills(status, faint) {
    var box = el("span", "pills" + (faint ? " faint" : ""));
    if (!status.length) box.appendChild(el("span", "muted", "\u2013"));
    status.forEach(function (s, i) {
      var known = Object.prototype.hasOwnProperty.call(STATUS, s);
      var pill = el("span", "pill " + (known ? s : "other"), known ? STATUS[s] : "\u2013");
      pill.title = "round " + (i + 1) + ": " + (s || "unknown");
      pill.setAttribute("aria-label", pill.title);
      box.appendChild(pill);
    });
    return box;
  }
  function sourceBadge(name, count) {
    var badge = el("span", "badge");
    badge.dataset.source = name;
    var dot = el("span", "bdot");
    dot.style.background = colors[name] || "#64748b";
    badge.appendChild(dot);
    badge.appendChild(document.createTextNode(name));
    if (count !== undefined && count !== null) badge.appendChild(el("b", "", String(count)));
    return badge;
  }
  function plural(n, word) { return n === null ? "\u2013 " + word + "s" : n + " " + word + (n === 1 ? "" : "s"); }
  function shorten(text, limit) { return text.length > limit ? text.slice(0, limit - 1) + "\u2026" : text; }

  function row(it) {
    var tr = el("tr", "qrow" + (it.changed.length ? " changed" : "") + (state.open === it ? " open" : ""));
    tr.dataset.testid = "query-row";
    tr.dataset.index = String(it.index);
    tr.dataset.id = it.id;
    if (it.changed.length) tr.dataset.changed = it.changed.join(",");
    var idCell = el("td");
    var button = el("button", "qid", it.id || "(no id)");
    button.type = "button";
    button.setAttribute("aria-expanded", state.open === it ? "true" : "false");
    button.setAttribute("aria-label", "Open the trajectory of query " + it.id);
    idCell.appendChild(button);
    if (it.changed.length) {
      var tag = el("span", "tag", "\u0394");
      tag.title = "changed vs baseline: " + it.changed.join(", ");
      idCell.appendChild(tag);
    }
    tr.appendChild(idCell);
    tr.appendChild(el("td", "group", str(it.q.group)));
    var statusCell = el("td");
    statusCell.appendChild(pills(it.status, false));
    tr.appendChild(statusCell);
    if (hasBaseline) {
      var baseCell = el("td");
      if (it.base) baseCell.appendChild(pills(arr(it.base.status).map(str), true));
      else baseCell.appendChild(el("span", "muted", "not in baseline"));
      tr.appendChild(baseCell);
    }
    var stepsCell = el("td", "num", it.steps === null ? "\u2013" : String(it.steps));
    if (it.base && num(it.base.steps) !== null && it.base.steps !== it.steps) {
      stepsCell.appendChild(el("div", "was", "was " + it.base.steps));
    }
    tr.appendChild(stepsCell);
    var srcCell = el("td");
    var badges = el("div", "badges");
    sortSources(Object.keys(it.sources)).forEach(function (name) {
      var n = num(it.sources[name]);
      if (n) badges.appendChild(sourceBadge(name, n));
    });
    if (!badges.childNodes.length) badges.appendChild(el("span", "muted", "no calls"));
    srcCell.appendChild(badges);
    tr.appendChild(srcCell);
    var queryCell = el("td");
    var text = str(it.q.query);
    var div = el("div", "qtext", shorten(text, 220));
    if (text.length) div.title = shorten(text, 1200);
    queryCell.appendChild(div);
    tr.appendChild(queryCell);
    return tr;
  }

  function prettyJSON(text) {
    var t = text.trim();
    var c = t.charAt(0);
    if (c !== "{" && c !== "[") return null;
    var value;
    try { value = JSON.parse(t); } catch (err) { return null; }
    var line = JSON.stringify(value, null, 1).replace(/\n\s*/g, " ");  // JSON escapes newlines in strings
    return line.length <= 100 ? line : JSON.stringify(value, null, 2);
  }
  function longBlock(text, limit, cls) {
    var box = el("div", "long");
    var pre = el("pre", cls);
    box.appendChild(pre);
    if (text.length <= limit) { pre.textContent = text; return box; }
    var full = false;
    var toggle = el("button", "link");
    toggle.type = "button";
    function paint() {
      pre.textContent = full ? text : text.slice(0, limit) + "\u2026";
      toggle.textContent = full ? "show less" : "show all (" + text.length + " characters)";
      toggle.setAttribute("aria-expanded", full ? "true" : "false");
    }
    toggle.addEventListener("click", function (event) { event.stopPropagation(); full = !full; paint(); });
    paint();
    box.appendChild(toggle);
    return box;
  }
  function labelled(label, node) {
    var wrap = el("div");
    wrap.appendChild(el("div", "block-label", label));
    wrap.appendChild(node);
    return wrap;
  }

  function stepNode(step, index, changedSteps) {
    var li = el("li", "step" + (changedSteps.indexOf(index) >= 0 ? " changed" : ""));
    li.dataset.testid = "step";
    if (!isObj(step)) { li.appendChild(el("span", "muted", "(empty step)")); return li; }
    var head = el("div", "step-head");
    var role = str(step.role) || "step";
    head.appendChild(el("span", "role " + role.replace(/[^a-z]/gi, ""), role));
    var tool = isObj(step.tool) ? step.tool : null;
    if (tool) head.appendChild(el("span", "toolname", str(tool.name) || "(unnamed tool)"));
    if (step.source) head.appendChild(sourceBadge(str(step.source)));
    if (changedSteps.indexOf(index) >= 0) {
      var tag = el("span", "tag", "changed vs baseline");
      head.appendChild(tag);
    }
    li.appendChild(head);
    var text = str(step.text);
    if (text) li.appendChild(longBlock(text, TEXT_LIMIT, "text"));
    // Finish: the answer it gives, as text (its arguments are that answer; it gets no answer back)
    var finish = tool && isObj(step.finish) ? step.finish : null;
    if (finish) li.appendChild(finishNode(finish));
    else if (tool) {
      var args = str(tool.arguments);
      if (args) li.appendChild(labelled("arguments", longBlock(prettyJSON(args) || args, TEXT_LIMIT, "code")));
    }
    if (step.answer !== null && step.answer !== undefined && !(finish && !str(step.answer))) {
      var answer = str(step.answer);
      li.appendChild(labelled("answer", answer ? longBlock(prettyJSON(answer) || answer, ANSWER_LIMIT, "code")
        : el("span", "muted", "(empty)")));
    }
    if (step.key) {
      var key = el("div", "key", "key " + str(step.key));
      li.appendChild(key);
    }
    return li;
  }

  var GIVE_UP = "give_up_and_restart";
  function finishNode(finish) {
    var gaveUp = str(finish.return_type) === GIVE_UP;
    var answer = str(finish.text);
    var node = answer ? longBlock(answer, TEXT_LIMIT, "text")
      : el("span", "muted", gaveUp ? "(no answer: the agent gave up and restarted)" : "(no answer text)");
    var wrap = labelled(gaveUp ? "gave up (" + GIVE_UP + ")" : "final answer", node);
    wrap.dataset.testid = "finish";
    return wrap;
  }

  function trajectory(it) {
    var box = el("div", "trajectory");
    box.dataset.testid = "trajectory";
    var head = el("div", "traj-head");
    head.appendChild(el("span", "qid-big", it.id));
    if (it.q.group) head.appendChild(el("span", "group", str(it.q.group)));
    head.appendChild(pills(it.status, false));
    head.appendChild(el("span", "muted", plural(it.steps, "step") + ", " + plural(it.calls, "call")));
    box.appendChild(head);
    box.appendChild(el("div", "traj-query", str(it.q.query) || "(no query text)"));
    if (it.base) {
      var base = el("div", "traj-base");
      base.appendChild(el("span", "muted", "baseline:"));
      base.appendChild(pills(arr(it.base.status).map(str), true));
      base.appendChild(el("span", "muted", plural(num(it.base.steps), "step")));
      base.appendChild(el("span", it.changed.length ? "tag" : "muted",
        it.changed.length ? "changed: " + it.changed.join(", ") : "unchanged"));
      box.appendChild(base);
    }
    var changedSteps = it.base ? arr(it.base.changed_steps).map(Number) : [];
    var list = el("ol", "steps");
    it.trajectory.forEach(function (step, i) { list.appendChild(stepNode(step, i, changedSteps)); });
    if (!it.trajectory.length) box.appendChild(el("p", "muted", "No trajectory recorded."));
    box.appendChild(list);
    var final = el("div", "final");
    final.dataset.testid = "final-answer";
    var given = isObj(it.q.final) ? it.q.final : null;  // the Finish call's arguments, read
    var gaveUp = given !== null && str(given.return_type) === GIVE_UP;
    final.appendChild(el("div", "block-label", gaveUp ? "final answer: the agent gave up (" + GIVE_UP + ")"
      : "final answer"));
    var answer = given ? str(given.text) : str(it.q.final_answer);
    final.appendChild(answer ? longBlock(answer, TEXT_LIMIT, "text") : el("span", "muted", "(none)"));
    var reasons = arr(it.q.reasons);
    var rounds = Math.max(reasons.length, it.status.length);
    if (rounds) {
      final.appendChild(el("div", "block-label", "judge"));
      var ul = el("ul", "reasons");
      for (var r = 0; r < rounds; r++) {
        var li = el("li");
        li.appendChild(pills(it.status.length > r ? [it.status[r]] : ["unscored"], false));
        li.appendChild(el("span", "muted", UNIT + (r + 1)));
        li.appendChild(el("span", "", str(reasons[r]) || "no reason given"));
        ul.appendChild(li);
      }
      final.appendChild(ul);
    }
    box.appendChild(final);
    return box;
  }

  function closeDetail() {
    var open = controls.rows.querySelector("tr.detail");
    if (open) open.parentNode.removeChild(open);
    var prev = controls.rows.querySelector("tr.qrow.open");
    if (prev) {
      prev.classList.remove("open");
      var b = prev.querySelector("button.qid");
      if (b) b.setAttribute("aria-expanded", "false");
    }
  }
  function openDetail(tr, it) {
    closeDetail();
    state.open = it;
    tr.classList.add("open");
    var b = tr.querySelector("button.qid");
    if (b) b.setAttribute("aria-expanded", "true");
    var detail = el("tr", "detail");
    var cell = el("td");
    cell.colSpan = tr.children.length;
    cell.appendChild(trajectory(it));
    detail.appendChild(cell);
    tr.parentNode.insertBefore(detail, tr.nextSibling);
  }

  function render() {
    var total = items.length, shown = state.shown.length;
    var pages = Math.max(1, Math.ceil(shown / PAGE_SIZE));
    if (state.page >= pages) state.page = pages - 1;
    var start = state.page * PAGE_SIZE;
    var slice = state.shown.slice(start, start + PAGE_SIZE);
    controls.count.textContent = shown + " of " + total + " queries";
    controls.pageLabel.textContent = shown ? "rows " + (start + 1) + "\u2013" + (start + slice.length) +
      " \u00b7 page " + (state.page + 1) + " of " + pages : "";
    controls.prev.disabled = state.page <= 0;
    controls.next.disabled = state.page >= pages - 1;
    var body = controls.rows;
    body.textContent = "";
    var fragment = document.createDocumentFragment();
    var openRow = null;
    slice.forEach(function (it) {
      var tr = row(it);
      if (state.open === it) openRow = tr;
      fragment.appendChild(tr);
    });
    if (!slice.length) {
      var empty = el("tr", "empty-row");
      var td = el("td", "", total ? "No query matches these filters." : "This run lists no queries.");
      td.colSpan = hasBaseline ? 7 : 6;
      empty.appendChild(td);
      fragment.appendChild(empty);
    }
    body.appendChild(fragment);
    if (openRow) openDetail(openRow, state.open);
  }

  function wire() {
    controls.search.addEventListener("input", filter);
    [controls.status, controls.source, controls.sort].forEach(function (c) { c.addEventListener("change", filter); });
    controls.reset.addEventListener("click", function () {
      controls.search.value = "";
      controls.status.value = "all";
      controls.source.value = "";
      controls.sort.value = "id-asc";
      filter();
    });
    controls.prev.addEventListener("click", function () { if (state.page > 0) { state.page--; render(); } });
    controls.next.addEventListener("click", function () { state.page++; render(); });
    controls.rows.addEventListener("click", function (event) {
      var target = event.target;
      var tr = target && target.closest ? target.closest("tr.qrow") : null;
      if (!tr || !controls.rows.contains(tr)) return;
      if (window.getSelection && String(window.getSelection()).length && target.tagName !== "BUTTON") return;
      var it = items[Number(tr.dataset.index)];
      if (!it) return;
      if (state.open === it) { closeDetail(); state.open = null; } else { openDetail(tr, it); }
    });
  }

  if (broken) {
    var box = el("div", "error-box", "The report's data could not be read: the page shows no queries.");
    var section = document.querySelector("section.queries");
    if (section) section.insertBefore(box, section.firstChild);
  }
  wire();
  filter();
  document.body.dataset.ready = "1";
  window.stbReportReady = performance.now();
})();
"""
