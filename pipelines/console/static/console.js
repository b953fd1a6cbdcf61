// fraudlake console: the live parts. Data is written with textContent, never as HTML.
(function () {
  "use strict";
  const pollMs = Number(document.body.dataset.pollMs || 2000);

  function cell(text, cls) {
    const td = document.createElement("td");
    if (cls) td.className = cls;
    td.textContent = text == null ? "-" : String(text);
    return td;
  }
  function code(text) {
    const td = document.createElement("td");
    const c = document.createElement("code");
    c.textContent = text;
    td.appendChild(c);
    return td;
  }
  function link(text, href, cls) {
    const td = document.createElement("td");
    const a = document.createElement("a");
    a.href = href;
    a.textContent = text;
    if (cls) a.className = cls;
    td.appendChild(a);
    return td;
  }
  function time(iso) {
    return iso ? iso.replace("T", " ").slice(0, 19) : "-";
  }
  function setLive(state, text) {
    const el = document.getElementById("live-state");
    if (el) { el.dataset.state = state; el.textContent = text; }
  }

  // Live alerts: poll for alerts detected after the newest one shown, prepend them.
  function followAlerts(params, cursor, limit) {
    const body = document.getElementById("alerts-body");
    const seen = new Set(Array.from(body.querySelectorAll("tr[data-alert-id]")).map((r) => r.dataset.alertId));
    let added = 0;
    async function poll() {
      const query = new URLSearchParams(Object.assign({}, params, { after: cursor }));
      try {
        const response = await fetch("/api/alerts?" + query.toString(), { cache: "no-store" });
        const data = await response.json();
        if (!response.ok) throw new Error(data.error || response.status);
        const fresh = data.alerts.filter((a) => !seen.has(a.alertId));
        if (fresh.length) {
          const empty = body.querySelector("tr.empty");
          if (empty) empty.remove();
          for (const a of fresh.reverse()) {
            seen.add(a.alertId);
            const tr = document.createElement("tr");
            tr.dataset.alertId = a.alertId;
            tr.className = "fresh";
            tr.append(
              cell(time(a.detectedAt)),
              link(String(a.ruleId), "/rules/" + a.ruleId),
              code(a.keyValue),
              code(a.transactionId),
              cell(time(a.eventTime)),
              cell(a.aggregatorFunctionType + " " + a.aggregateValue, "num value"),
              cell(a.limitOperatorType + " " + a.limit + (a.baselineValue == null ? "" : " × baseline " + a.baselineValue) +
                " (" + a.windowMinutes + " min)"),
              cell(a.batchId),
              cell(a.latencyMs == null ? "-" : (a.latencyMs / 1000).toFixed(1) + " s", "num"),
              link("evidence", "/alerts/evidence?id=" + encodeURIComponent(a.alertId), "evidence"),
            );
            body.insertBefore(tr, body.firstChild);
          }
          added += fresh.length;
          while (body.rows.length > limit) body.deleteRow(body.rows.length - 1);
          const counter = document.getElementById("new-count");
          if (counter) counter.textContent = added + " new since the page opened.";
        }
        cursor = data.cursor || cursor;
        setLive("ok", "live · " + new Date().toISOString().slice(11, 19) + " UTC");
      } catch (error) {
        setLive("error", "not updating: " + error.message);
      }
      window.setTimeout(poll, pollMs);
    }
    window.setTimeout(poll, pollMs);
  }

  // An edit's progress: committed -> applied (version) -> first micro-batch.
  function followEdit(id) {
    async function poll() {
      try {
        const response = await fetch("/api/edits/" + encodeURIComponent(id), { cache: "no-store" });
        const p = await response.json();
        const applied = document.getElementById("step-applied");
        const batch = document.getElementById("step-batch");
        if (p.refused) {
          applied.className = "failed";
          applied.querySelector(".detail").textContent = "refused by the rules CDC job: " + p.refused;
          batch.className = "skipped";
        } else if (p.applied) {
          applied.className = "done";
          applied.querySelector(".detail").textContent = "rules table v" + p.applied.version + " at " + time(p.applied.at) +
            " (" + p.applied.op + " → " + p.applied.state + "), " + p.applied.after + " after the commit";
        }
        if (p.firstBatch) {
          batch.className = "done";
          batch.querySelector(".detail").textContent = "batch " + p.firstBatch.batchId + " (rules v" + p.firstBatch.rulesVersion +
            "), finished " + time(p.firstBatch.finishedAt) + ", " + p.firstBatch.after + " after the commit";
        }
        if (p.done) { document.getElementById("edit-live").textContent = ""; return; }
      } catch (error) { /* keep polling: the next answer repairs the page */ }
      window.setTimeout(poll, pollMs);
    }
    window.setTimeout(poll, pollMs);
  }

  function followBacktest(id) {
    async function poll() {
      try {
        const response = await fetch("/api/backtest/" + encodeURIComponent(id), { cache: "no-store" });
        const state = await response.json();
        if (state.state !== "running" && state.state !== "queued") { window.location.reload(); return; }
      } catch (error) { /* retry */ }
      window.setTimeout(poll, pollMs);
    }
    window.setTimeout(poll, pollMs);
  }

  // Charts (uPlot): one x array (epoch seconds) and one array per series.
  const COLORS = ["#2563eb", "#d97706", "#dc2626", "#059669", "#7c3aed"];
  function chart(id, x, series, opts) {
    const target = document.getElementById(id);
    if (!target || typeof uPlot === "undefined") return null;
    target.textContent = "";
    const width = Math.max(target.clientWidth || 480, 320);
    const config = {
      width: width,
      height: 220,
      series: [{}].concat(series.map((s, i) => ({
        label: s.label, stroke: COLORS[i % COLORS.length], width: 2,
        fill: opts && opts.bars ? COLORS[i % COLORS.length] + "55" : undefined,
        paths: opts && opts.bars ? uPlot.paths.bars({ size: [0.6, 40] }) : undefined,
        points: { show: x.length < 60 },
      }))),
      axes: [{}, { size: 60 }],
      scales: { x: opts && opts.bars && x.length
        ? { time: true, range: [Math.min(...x) - 86400, Math.max(...x) + 86400] }
        : { time: true } },
    };
    return new uPlot(config, [x].concat(series.map((s) => s.values)), target);
  }
  const seconds = (values) => values.map((v) => (v == null ? null : v / 1000));

  function drawHealth(d) {
    chart("chart-latency", d.x, [
      { label: "p50", values: seconds(d.latencyP50Ms) }, { label: "p95", values: seconds(d.latencyP95Ms) },
      { label: "p99", values: seconds(d.latencyP99Ms) }]);
    chart("chart-evaluated", d.x, [
      { label: "p50", values: seconds(d.evaluatedP50Ms) }, { label: "p95", values: seconds(d.evaluatedP95Ms) },
      { label: "p99", values: seconds(d.evaluatedP99Ms) }]);
    chart("chart-duration", d.x, [{ label: "duration", values: d.durationS }]);
    chart("chart-rows", d.x, [{ label: "rows", values: d.rows }, { label: "alerts", values: d.alerts }]);
    chart("chart-late", d.x, [{ label: "late", values: d.late }, { label: "quarantined", values: d.quarantined }]);
  }
  function healthCharts() {
    const data = document.getElementById("health-data");
    if (!data) return;
    drawHealth(JSON.parse(data.textContent));
    async function refresh() {
      try {
        const response = await fetch("/api/health", { cache: "no-store" });
        const h = await response.json();
        if (response.ok) {
          drawHealth(h.charts);
          const status = document.getElementById("engine-message");
          if (status) status.textContent = h.status.message;
        }
      } catch (error) { /* keep the charts shown */ }
      window.setTimeout(refresh, Math.max(pollMs * 5, 10000));
    }
    window.setTimeout(refresh, Math.max(pollMs * 5, 10000));
  }

  function dayChart() {
    const data = document.getElementById("days-data");
    if (!data) return;
    const days = JSON.parse(data.textContent);
    const x = days.map((d) => Date.parse(d.day + "T00:00:00Z") / 1000);
    chart("chart-days", x, [{ label: "alerts", values: days.map((d) => d.alerts) }], { bars: true });
  }

  window.fraudlake = { followAlerts, followEdit, followBacktest, healthCharts, dayChart };
})();

// The rule form: the limit is a factor once a baseline is chosen; the page says so as the choice changes. The
// model validates everything (nothing is disabled or dropped here: what is typed is what is sent).
(function () {
  "use strict";
  const baseline = document.getElementById("f-baselineAggregator");
  const label = document.getElementById("limit-label");
  if (!baseline || !label) return;
  const update = () => {
    label.textContent = baseline.value ? "Limit (factor k of the baseline)" : "Limit";
  };
  baseline.addEventListener("change", update);
  update();
})();

// CSRF: every state-changing request carries the session's token. Forms get it as a hidden field from the
// templates (added here too for a POST form that lacks it); fetch calls that change something use fraudlakeFetch,
// which sends it as the X-CSRF-Token header.
(function () {
  "use strict";
  const meta = document.querySelector('meta[name="csrf-token"]');
  const token = meta ? meta.content : "";
  window.fraudlakeFetch = function (url, options) {
    const opts = Object.assign({ credentials: "same-origin" }, options || {});
    const method = (opts.method || "GET").toUpperCase();
    if (!["GET", "HEAD", "OPTIONS"].includes(method)) {
      opts.headers = Object.assign({}, opts.headers || {}, { "X-CSRF-Token": token });
    }
    return fetch(url, opts);
  };
  if (!token) return;
  for (const form of document.querySelectorAll('form[method="post" i]')) {
    if (!form.querySelector('input[name="csrf_token"]')) {
      const input = document.createElement("input");
      input.type = "hidden";
      input.name = "csrf_token";
      input.value = token;
      form.appendChild(input);
    }
  }
})();
