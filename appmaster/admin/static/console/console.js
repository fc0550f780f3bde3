// stram's web console: polls the admin API (relative URLs) and draws the application.
// Plain JavaScript and inline SVG, no library. Every string from the application (names,
// labels, errors, logs) is inserted with textContent or as an attribute value, never as HTML.
'use strict';
(function () {
  const POLL_MILLIS = 1000;
  const HISTORY_MILLIS = 5 * 60 * 1000;   // the throughput charts' span
  const RATE_MILLIS = 5000;               // rates are averaged over this much history
  const LOG_TAIL = 500;

  // ------------------------------------------------------------ the admin API
  // Authorization: a token passed as #token=<t> is kept in sessionStorage (and removed from the
  // address bar); every request sends it as a Bearer token, with the same-origin credentials.
  function captureToken() {
    const hash = location.hash.replace(/^#/, '');
    if (!hash) return;
    const params = new URLSearchParams(hash);
    if (!params.has('token')) return;
    sessionStorage.setItem('stramToken', params.get('token'));
    params.delete('token');
    const rest = params.toString();
    window.history.replaceState(null, '', location.pathname + location.search + (rest ? '#' + rest : ''));
  }

  async function api(path, options) {
    const opts = options || {};
    const headers = {Accept: 'application/json'};
    const token = sessionStorage.getItem('stramToken');
    if (token) headers.Authorization = 'Bearer ' + token;
    const init = {method: opts.method || 'GET', headers: headers, credentials: 'same-origin', cache: 'no-store'};
    if (opts.body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(opts.body);
    }
    const response = await fetch('ws/v2/stram/' + path, init);
    const type = response.headers.get('Content-Type') || '';
    const data = type.indexOf('json') >= 0 ? await response.json() : await response.text();
    if (!response.ok) {
      const why = data && data.error ? data.error : response.status + ' ' + response.statusText;
      throw new Error(why);
    }
    return data;
  }

  // ------------------------------------------------------------ DOM helpers
  const $ = (id) => document.getElementById(id);
  const SVG_NS = 'http://www.w3.org/2000/svg';

  function el(tag, attrs, children) {
    const node = document.createElement(tag);
    setAttrs(node, attrs);
    (children || []).forEach((c) => node.append(typeof c === 'string' ? document.createTextNode(c) : c));
    return node;
  }

  function svgEl(tag, attrs, text) {
    const node = document.createElementNS(SVG_NS, tag);
    setAttrs(node, attrs);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function setAttrs(node, attrs) {
    Object.entries(attrs || {}).forEach(([key, value]) => {
      if (key === 'text') node.textContent = value;
      else if (key === 'className') node.setAttribute('class', value);
      else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
      else if (value !== null && value !== undefined) node.setAttribute(key, String(value));
    });
  }

  function setText(node, text) {
    const value = text === null || text === undefined ? '' : String(text);
    if (node.textContent !== value) node.textContent = value;
  }

  function fmtNumber(n, digits) {
    if (n === null || n === undefined || Number.isNaN(n)) return '–';
    return Number(n).toLocaleString('en-US', {maximumFractionDigits: digits || 0, minimumFractionDigits: digits || 0});
  }

  // window ids come as hex strings: JSON numbers lose the low bits of 64-bit ids in a browser
  function windowHex(hex) {
    return hex === null || hex === undefined ? '–' : hex;
  }

  function windowDecimal(hex) {
    return hex ? BigInt.asIntN(64, BigInt('0x' + hex)).toString() : '';
  }

  function fmtDuration(millis) {
    let s = Math.max(0, Math.floor(millis / 1000));
    const d = Math.floor(s / 86400); s -= d * 86400;
    const h = Math.floor(s / 3600); s -= h * 3600;
    const m = Math.floor(s / 60); s -= m * 60;
    const pad = (x) => String(x).padStart(2, '0');
    return (d ? d + 'd ' : '') + (d || h ? h + 'h ' : '') + pad(m) + 'm ' + pad(s) + 's';
  }

  // an event-time watermark (epoch ms, "idle", "end" or null) and its lag behind now
  function fmtWatermark(wm, lag) {
    if (wm === null || wm === undefined) return '–';
    if (typeof wm === 'string') return wm;
    if (!(Math.abs(wm) <= 8.64e15)) return String(wm);  // beyond what a Date holds
    const when = new Date(wm).toISOString().replace('T', ' ').replace('Z', ' UTC');
    if (lag === null || lag === undefined) return when;
    return when + ' (lag ' + (Math.abs(lag) < 60000 ? fmtNumber(lag / 1000, 1) + ' s' : fmtDuration(lag)) + ')';
  }

  function message(text, isError) {
    const node = $('message');
    node.hidden = !text;
    node.className = isError ? 'error' : 'ok';
    setText(node, text);
  }

  // ------------------------------------------------------------ state kept by the page
  const samples = new Map();        // operator id -> [{t, processed, emitted, cpu}]
  let logical = null;               // the logicalPlan document
  let logicalKey = '';              // operator ids + partition counts it was drawn for
  let filter = null;                // the logical operator whose partitions are listed
  let clockOffset = 0;              // server time - this browser's time

  function remember(rows, now) {
    const seen = new Set();
    rows.forEach((r) => {
      seen.add(r.id);
      let h = samples.get(r.id);
      if (!h) samples.set(r.id, h = []);
      const last = h[h.length - 1];
      if (last && (r.tuples_processed_total < last.processed || r.tuples_out_total < last.emitted)) h.length = 0;
      h.push({t: now, processed: r.tuples_processed_total, emitted: r.tuples_out_total, cpu: r.cpu_seconds_total});
      while (h.length > 2 && h[0].t < now - HISTORY_MILLIS) h.shift();
    });
    Array.from(samples.keys()).forEach((id) => { if (!seen.has(id)) samples.delete(id); });
  }

  // per second over the last RATE_MILLIS of samples ending at index `end`
  function rate(h, key, end) {
    if (end === undefined) end = h.length - 1;
    if (end < 1) return null;
    let start = end - 1;
    while (start > 0 && h[end].t - h[start - 1].t <= RATE_MILLIS) start -= 1;
    const dt = (h[end].t - h[start].t) / 1000;
    return dt > 0 ? (h[end][key] - h[start][key]) / dt : null;
  }

  // ------------------------------------------------------------ header
  function drawHeader(info, windows) {
    document.title = info.name + ' · stram';
    setText($('app-name'), info.name);
    setText($('app-id'), info.id);
    const state = $('app-state');
    setText(state, info.state);
    state.className = 'state state-' + String(info.state).toLowerCase();
    const attrs = logical ? logical.attributes : {};
    setText($('app-user'), attrs.user || '–');
    setText($('app-queue'), attrs.queue || '–');
    setText($('app-mode'), attrs.processing_mode || '–');
    setText($('app-attempt'), info.attempt);
    const now = Date.now() + clockOffset;
    const end = info.finished_millis || now;
    setText($('app-uptime'), fmtDuration(end - info.started_millis));
    setText($('app-committed'), windowHex(info.committed_window_hex));
    $('app-committed').title = windowDecimal(info.committed_window_hex);
    if (windows) {
      setText($('app-committed-time'), new Date(windows.committed_millis).toLocaleString());
      setText($('app-lag'), fmtNumber(windows.committed_lag_seconds, 1) + ' s');
    }
    const diag = $('app-diagnostics');
    diag.hidden = !info.diagnostics;
    setText(diag, info.diagnostics || '');
    const stalled = $('app-stalled');  // the watchdog: a frozen committed window, and who holds it back
    stalled.hidden = !info.stalled;
    setText(stalled, info.stalled || '');
    // nodes that lost containers repeatedly: no new container goes there until the time shown
    const blacklisted = info.blacklistedNodes || [];
    const blacklist = $('app-blacklist');
    blacklist.hidden = blacklisted.length === 0;
    setText(blacklist, blacklisted.length === 0 ? '' : 'blacklisted nodes: ' + blacklisted.map((b) =>
      b.host + ' (' + b.failures + ' container failures, until ' + new Date(b.until).toLocaleString() + ')'
    ).join(', '));
    const ended = ['SUCCEEDED', 'FAILED', 'KILLED'].indexOf(info.state) >= 0;
    $('shutdown-app').disabled = ended;
    $('kill-app').disabled = ended;
  }

  // ------------------------------------------------------------ the logical DAG
  function drawDag() {
    const svg = $('dag');
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    if (!logical) return;
    const ops = logical.operators.map((o) => o.name);
    const edges = [];
    logical.streams.forEach((s) => {
      const from = s.from.split('.')[0];
      s.to.forEach((t) => edges.push({from: from, to: t.split('.')[0], stream: s}));
    });
    // layers: the longest path from a source (the DAG has no cycles)
    const layer = new Map(ops.map((o) => [o, 0]));
    for (let round = 0; round < ops.length; round += 1) {
      edges.forEach((e) => {
        if (layer.get(e.to) <= layer.get(e.from)) layer.set(e.to, layer.get(e.from) + 1);
      });
    }
    const columns = [];
    ops.forEach((o) => { (columns[layer.get(o)] = columns[layer.get(o)] || []).push(o); });
    const W = 160, H = 50, GAP_X = 170, GAP_Y = 40, PAD = 20;
    const pos = new Map();
    columns.forEach((col, x) => col.forEach((o, y) => pos.set(o, {x: PAD + x * (W + GAP_X), y: PAD + y * (H + GAP_Y)})));
    const width = PAD * 2 + columns.length * (W + GAP_X) - GAP_X;
    const height = PAD * 2 + Math.max(...columns.map((c) => c.length)) * (H + GAP_Y) - GAP_Y + 14;
    svg.setAttribute('viewBox', '0 0 ' + width + ' ' + height);
    svg.setAttribute('width', width);
    svg.setAttribute('height', height);
    const defs = svgEl('defs');
    const marker = svgEl('marker', {id: 'arrow', viewBox: '0 0 10 10', refX: 10, refY: 5, markerWidth: 7,
                                    markerHeight: 7, orient: 'auto-start-reverse'});
    marker.append(svgEl('path', {d: 'M 0 0 L 10 5 L 0 10 z', className: 'arrow'}));
    defs.append(marker);
    svg.append(defs);
    edges.forEach((e, i) => {
      const a = pos.get(e.from), b = pos.get(e.to);
      if (!a || !b) return;
      const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2;
      const mid = (x1 + x2) / 2;
      const g = svgEl('g', {className: 'stream', 'data-stream': e.stream.name});
      g.append(svgEl('path', {d: 'M ' + x1 + ' ' + y1 + ' C ' + mid + ' ' + y1 + ', ' + mid + ' ' + y2 + ', ' + x2 + ' ' + y2,
                              'marker-end': 'url(#arrow)', className: 'edge'}));
      const label = e.stream.name + (e.stream.locality ? ' · ' + e.stream.locality : '');
      g.append(svgEl('text', {x: mid, y: (y1 + y2) / 2 - 6 - (i % 2) * 0, 'text-anchor': 'middle',
                              className: 'edge-label'}, label));
      svg.append(g);
    });
    logical.operators.forEach((o) => {
      const p = pos.get(o.name);
      const link = svgEl('a', {href: '#operators-section', className: 'dag-operator', 'data-operator': o.name});
      link.addEventListener('click', (ev) => { ev.preventDefault(); setFilter(o.name); });
      const title = svgEl('title', {}, o.class);
      link.append(title);
      link.append(svgEl('rect', {x: p.x, y: p.y, width: W, height: H, rx: 6}));
      link.append(svgEl('text', {x: p.x + W / 2, y: p.y + 21, 'text-anchor': 'middle', className: 'op-name'}, o.name));
      link.append(svgEl('text', {x: p.x + W / 2, y: p.y + 39, 'text-anchor': 'middle', className: 'op-parts'},
                        o.partitions + (o.partitions === 1 ? ' partition' : ' partitions')));
      svg.append(link);
    });
    // the scale form's choices
    const select = $('scale-operator');
    const chosen = select.value;
    while (select.firstChild) select.removeChild(select.firstChild);
    logical.operators.forEach((o) => select.append(el('option', {value: o.name, text: o.name})));
    if (chosen && ops.indexOf(chosen) >= 0) select.value = chosen;
  }

  function setFilter(name) {
    filter = name;
    $('op-filter').hidden = !name;
    setText($('op-filter-name'), name || '');
    if (name) {
      $('scale-operator').value = name;
      const o = logical && logical.operators.find((x) => x.name === name);
      if (o) $('scale-count').value = o.partitions;
      $('operators-section').scrollIntoView({behavior: 'instant', block: 'start'});
    }
    lastOperators && drawOperators(lastOperators, lastWindows);
  }

  // ------------------------------------------------------------ operators
  let lastOperators = null, lastWindows = null;

  function sparkline(h) {
    const W = 150, H = 28;
    const svg = svgEl('svg', {width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, className: 'spark'});
    const points = [];
    for (let i = 1; i < h.length; i += 1) {
      const r = rate(h, 'processed', i);
      if (r !== null) points.push([h[i].t, r]);
    }
    svg.setAttribute('data-points', points.length);
    if (points.length < 2) return svg;
    // the last 5 minutes; until there are that many, the time since the page was opened
    const t1 = points[points.length - 1][0], t0 = Math.max(points[0][0], t1 - HISTORY_MILLIS);
    const span = Math.max(1, t1 - t0);
    const max = Math.max(1, ...points.map((p) => p[1]));
    const coords = points.map((p) => ((p[0] - t0) / span * (W - 2) + 1).toFixed(1) + ','
                                     + (H - 2 - p[1] / max * (H - 4)).toFixed(1));
    svg.append(svgEl('polyline', {points: coords.join(' '), className: 'spark-line'}));
    svg.append(svgEl('title', {}, 'max ' + fmtNumber(max, 1) + ' tuples/s'));
    return svg;
  }

  function upsertRows(tbody, items, key, columns, build) {
    const existing = new Map(Array.from(tbody.rows).map((tr) => [tr.dataset.key, tr]));
    items.forEach((item, index) => {
      const k = String(key(item));
      let tr = existing.get(k);
      if (!tr) {
        tr = el('tr', {'data-key': k});
        columns.forEach((c) => tr.append(el('td', {className: c})));
        build && build(tr, item);
      }
      existing.delete(k);
      if (tbody.rows[index] !== tr) tbody.insertBefore(tr, tbody.rows[index] || null);
    });
    existing.forEach((tr) => tr.remove());
  }

  const OP_COLUMNS = ['id', 'label', 'container', 'state', 'num processed-rate', 'num emitted-rate', 'chart',
                      'num processed-total', 'num latency', 'watermark', 'window current', 'window checkpoint',
                      'window recovery', 'num failures'];

  function drawOperators(rows, windows) {
    lastOperators = rows; lastWindows = windows;
    const tbody = $('operators').tBodies[0];
    const shown = rows.filter((r) => !filter || r.name === filter);
    upsertRows(tbody, shown, (r) => r.id, OP_COLUMNS, (tr, r) => { tr.dataset.operator = r.name; });
    const byId = new Map(shown.map((r) => [String(r.id), r]));
    Array.from(tbody.rows).forEach((tr) => {
      const r = byId.get(tr.dataset.key);
      const c = tr.cells;
      const h = samples.get(r.id) || [];
      const w = windows && windows.operators[String(r.id)];
      setText(c[0], r.id);
      setText(c[1], r.label);
      setText(c[2], r.container);
      setText(c[3], r.state + (r.blocked ? ' (blocked)' : ''));
      c[3].className = 'state-cell op-state-' + r.state.toLowerCase() + (r.blocked ? ' blocked' : '');
      setText(c[4], fmtNumber(rate(h, 'processed'), 1));
      setText(c[5], fmtNumber(rate(h, 'emitted'), 1));
      c[6].replaceChildren(sparkline(h));
      setText(c[7], fmtNumber(r.tuples_processed_total));
      setText(c[8], w && w.latency_millis !== null ? fmtNumber(w.latency_millis) : '–');
      setText(c[9], fmtWatermark(r.watermark, r.watermark_lag_millis));
      setText(c[10], w ? windowHex(w.current_window_hex) : '–');
      setText(c[11], w ? windowHex(w.checkpoint_hex) : '–');
      setText(c[12], w ? windowHex(w.recovery_checkpoint_hex) : '–');
      setText(c[13], r.restarts);
      c[13].title = r.last_error || '';
      c[13].classList.toggle('failed', r.restarts > 0);
    });
  }

  // ------------------------------------------------------------ containers
  const CT_COLUMNS = ['id', 'host', 'num pid', 'num memory', 'num cpu', 'num heartbeat', 'state', 'ops', 'actions'];

  function buildContainerActions(tr, c) {
    const cell = tr.cells[8];
    cell.append(el('button', {type: 'button', className: 'log', text: 'log', onclick: () => showLog(c.id)}));
    cell.append(el('button', {type: 'button', className: 'stack', text: 'stack', onclick: () => showStack(c.id)}));
    cell.append(el('button', {type: 'button', className: 'kill danger', text: 'kill', onclick: () => killContainer(c.id)}));
  }

  function drawContainers(rows, operators) {
    const tbody = $('containers').tBodies[0];
    upsertRows(tbody, rows, (c) => c.id, CT_COLUMNS, buildContainerActions);
    const byId = new Map(rows.map((c) => [c.id, c]));
    const now = Date.now() + clockOffset;
    Array.from(tbody.rows).forEach((tr) => {
      const c = byId.get(tr.dataset.key);
      const cells = tr.cells;
      const running = c.state === 'RUNNING';
      let cpu = null;
      operators.filter((r) => r.container === c.id).forEach((r) => {
        const v = rate(samples.get(r.id) || [], 'cpu');
        if (v !== null) cpu = (cpu || 0) + v * 100;
      });
      setText(cells[0], c.id);
      setText(cells[1], c.host || '–');
      setText(cells[2], c.process ? String(c.process).split('@')[0] : '–');
      setText(cells[3], c.memory_mb_used ? fmtNumber(c.memory_mb_used) : '–');
      setText(cells[4], running ? fmtNumber(cpu, 1) : '–');
      setText(cells[5], running && c.last_heartbeat_millis ? fmtNumber(Math.max(0, now - c.last_heartbeat_millis) / 1000, 1) : '–');
      setText(cells[6], c.state);
      cells[6].className = 'state-cell ct-state-' + String(c.state).toLowerCase();
      setText(cells[7], c.operators.join(', '));
      tr.classList.toggle('ended', !running && c.state !== 'PENDING' && c.state !== 'WAITING');
      cells[8].querySelectorAll('button.stack, button.kill').forEach((b) => { b.disabled = !running; });
    });
  }

  // ------------------------------------------------------------ the panel (stacks, logs)
  function showPanel(title, text, url) {
    $('panel').hidden = false;
    setText($('panel-title'), title);
    setText($('panel-text'), text);
    $('panel-link').hidden = !url;
    const a = $('panel-url');
    if (url && /^https?:\/\//.test(url)) { a.href = url; setText(a, url); } else { a.removeAttribute('href'); setText(a, ''); }
    $('panel').scrollIntoView({behavior: 'instant', block: 'start'});
  }

  function formatStack(trace) {
    return trace.threads.map((t) => {
      const head = 'Thread ' + t.name + (t.operator !== null && t.operator !== undefined ? ' (operator ' + t.operator + ')' : '')
        + (t.daemon ? ' daemon' : '');
      const frames = t.frames.map((f) => '  File "' + f.file + '", line ' + f.line + ', in ' + f.function
                                        + (f.code ? '\n    ' + f.code : ''));
      return head + '\n' + frames.join('\n');
    }).join('\n\n');
  }

  async function showStack(id) {
    showPanel('stack of ' + id, 'asking ' + id + ' for its threads’ stacks…');
    try {
      const trace = await api('containers/' + encodeURIComponent(id) + '/stackTrace');
      showPanel('stack of ' + id + ' at ' + new Date(trace.millis).toLocaleTimeString(), formatStack(trace));
    } catch (e) {
      showPanel('stack of ' + id, 'error: ' + e.message);
    }
  }

  async function showLog(id) {
    showPanel('log of ' + id, 'reading…');
    try {
      const doc = await api('containers/' + encodeURIComponent(id) + '/log?format=json&tail=' + LOG_TAIL);
      if (doc.url) showPanel('log of ' + id, 'on the NodeManager’s log page:', doc.url);
      else showPanel('log of ' + id + ' (last ' + doc.tail + ' lines)', doc.text || '(empty)');
    } catch (e) {
      showPanel('log of ' + id, 'error: ' + e.message);
    }
  }

  // ------------------------------------------------------------ actions
  async function act(question, path, body, done) {
    if (!window.confirm(question)) return;
    try {
      const answer = await api(path, {method: 'PUT', body: body || {}});
      message(done(answer), false);
    } catch (e) {
      message('refused: ' + e.message, true);
    }
  }

  function killContainer(id) {
    act('Kill container ' + id + '? The master recovers its operators from their checkpoints.',
        'containers/' + encodeURIComponent(id), {}, () => 'killed ' + id);
  }

  function wireActions() {
    $('shutdown-app').addEventListener('click', () => act(
      'Shut down ' + $('app-name').textContent + '? Its input operators end their streams and it finishes.',
      'shutdown', {}, () => 'shutdown requested'));
    $('kill-app').addEventListener('click', () => act(
      'Kill ' + $('app-name').textContent + '? Every container is stopped now.', 'kill', {}, () => 'kill requested'));
    $('scale-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const name = $('scale-operator').value;
      const count = parseInt($('scale-count').value, 10);
      if (!name || !(count >= 1)) { message('choose an operator and a count of at least 1', true); return; }
      act('Give ' + name + ' ' + count + ' partitions?', 'operators/' + encodeURIComponent(name) + '/partitions',
          {count: count}, (a) => a.changed ? name + ': ' + a.from + ' → ' + a.to + ' partitions'
                                           : name + ' already has ' + a.to + ' partitions');
    });
    $('op-filter-clear').addEventListener('click', () => setFilter(null));
    $('panel-close').addEventListener('click', () => { $('panel').hidden = true; });
  }

  // ------------------------------------------------------------ events
  function drawEvents(events) {
    const list = $('events');
    const recent = events.slice(-15).reverse();
    list.replaceChildren(...recent.map((e) => el('li', {}, [
      el('span', {className: 'muted', text: new Date(e.millis).toLocaleTimeString() + ' '}),
      el('span', {className: 'kind', text: e.kind + ' '}),
      el('span', {text: String(e.text).split('\n')[0]})])));
  }

  // ------------------------------------------------------------ polling
  let polls = 0;

  async function poll() {
    try {
      const [snapshot, windows] = await Promise.all([api('snapshot'), api('windows')]);
      const now = Date.now();
      clockOffset = windows.now_millis - now;
      const key = snapshot.operators.map((r) => r.id).join(',');
      if (!logical || key !== logicalKey || polls % 10 === 0) {
        logical = await api('logicalPlan');
        if (key !== logicalKey || !$('dag').firstChild) drawDag();
        logicalKey = key;
      }
      polls += 1;
      remember(snapshot.operators, now);
      drawHeader(snapshot.info, windows);
      drawOperators(snapshot.operators, windows);
      drawContainers(snapshot.containers, snapshot.operators);
      drawEvents(snapshot.info.events || []);
      setText($('status'), 'updated ' + new Date(now).toLocaleTimeString() + ' · polls every ' + POLL_MILLIS / 1000 + ' s');
      $('status').className = 'muted';
      document.body.dataset.polls = String(polls);
    } catch (e) {
      setText($('status'), 'the master does not answer: ' + e.message);
      $('status').className = 'error';
    }
    setTimeout(poll, POLL_MILLIS);
  }

  captureToken();
  wireActions();
  poll();
})();
