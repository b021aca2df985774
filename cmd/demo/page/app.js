// The demo page: no build step, no library; everything it loads comes from
// its own server.
'use strict';

const $ = (sel) => document.querySelector(sel);
let algorithms = [];
let steadyTimer = null;

function scenario() {
  const f = new FormData($('#scenario'));
  return {
    pattern: f.get('pattern'),
    rate: Number(f.get('rate')),
    duration: Number(f.get('duration')),
    limit: Number(f.get('limit')),
    window: Number(f.get('window')),
    burst: Number(f.get('burst')), // 0 (empty): the limit
    hold: Number(f.get('hold')),
    lease: Number(f.get('lease')), // 0 (empty): the hold rounded up, plus 1 s
    seed: Number(f.get('seed')),
    retry: f.get('retry'),
    clients: Number(f.get('clients')),
    keys: f.get('keys'),
    engine: f.get('engine'),
    compare: compare(f.get('compare-a'), f.get('compare-b')),
  };
}

// compare is two algorithms' IDs apart by a comma ("gcra,fw"), or '' (all
// seven) unless two different ones are picked.
function compare(a, b) {
  return a && b && a !== b ? `${a},${b}` : '';
}

function cell(row, text, cls) {
  const td = document.createElement('td');
  td.textContent = text;
  if (cls) td.className = cls;
  row.appendChild(td);
  return td;
}

// The scenario's controls, in the order the address lists them.
const fields = ['pattern', 'rate', 'duration', 'limit', 'window', 'burst', 'hold', 'lease', 'seed', 'retry', 'clients', 'keys', 'engine'];
// The settings the address lists only when set: left out (0), they take
// their defaults (the limit; the hold rounded up, plus 1 s).
const optional = new Set(['burst', 'lease']);

// What the page calls each retry mode and key mode.
const retryNames = {none: 'none (open loop)', nojitter: 'after retry_after, no jitter', full: 'full jitter', spread: "the middleware's spread"};
const keyNames = {shared: 'shared', 'per-client': 'per client'};
const engineNames = {module: "the module's commands", lua: 'the Lua FUNCTION library'};

// The address of a scenario: the page's own, with every setting in its
// query, so that a result can be linked.
function query(s) {
  const q = new URLSearchParams();
  for (const k of fields) {
    if (!(optional.has(k) && !s[k])) q.set(k, s[k]);
  }
  // Two algorithms compared, last, their IDs ([a-z]) apart by a plain comma.
  return `?${q}${s.compare ? `&compare=${s.compare}` : ''}`;
}

function address(s) {
  return location.pathname + query(s);
}

let runs = 0; // the last run asked for
let inflight = null; // its request, aborted when a newer run starts
let debounce = null; // the rerun a control's change has scheduled

// run simulates the scenario in the controls and shows the result; a run
// that a newer one overtakes shows nothing. After a result, the address
// carries the settings.
async function run(event) {
  if (event) event.preventDefault();
  clearTimeout(debounce);
  const n = ++runs;
  if (inflight) inflight.abort();
  inflight = new AbortController();
  const s = scenario();
  const status = $('#status');
  status.className = '';
  status.textContent = 'running…';
  const started = performance.now();
  let resp, body;
  try {
    resp = await fetch('api/simulate', {
      method: 'POST', headers: {'Content-Type': 'application/json'}, body: JSON.stringify(s),
      signal: inflight.signal,
    });
    body = await resp.json();
  } catch (e) {
    if (n !== runs) return;
    status.className = 'error';
    status.textContent = `the simulation failed: ${e.message}`;
    return;
  }
  if (n !== runs) return;
  if (!resp.ok) {
    status.className = 'error';
    status.textContent = body.error;
    return;
  }
  $('#caption').textContent = body.caption;
  $('#chart').innerHTML = body.svg;
  const tbody = $('#totals tbody');
  tbody.replaceChildren();
  for (const se of body.series) {
    const row = document.createElement('tr');
    row.dataset.algorithm = se.name;
    cell(row, se.name);
    cell(row, se.total[0], 'num admitted').dataset.field = 'admitted';
    cell(row, se.total[1], 'num refused').dataset.field = 'refused';
    cell(row, `${se.pass_rate.toFixed(1)} %`, 'num').dataset.field = 'pass';
    cell(row, se.most_in, 'num').dataset.field = 'most';
    cell(row, se.peak_mean.toFixed(2), 'num').dataset.field = 'peak';
    cell(row, se.retries, 'num').dataset.field = 'retries';
    cell(row, `${se.served.toFixed(1)} %`, 'num').dataset.field = 'served';
    cell(row, body.scenario.clients > 1 ? se.jain.toFixed(3) : '—', 'num').dataset.field = 'jain';
    cell(row, se.expected);
    tbody.appendChild(row);
  }
  $('#most-head').textContent = `Most in any ${body.scenario.window} s`;
  showClients(body);
  const ms = Math.round(performance.now() - started);
  const retries = body.series.reduce((n, se) => n + se.retries, 0);
  status.textContent = `${body.requests} requests${retries ? ` and ${retries} retries` : ''} × ${body.series.length} algorithms over ${body.scenario.duration} s of virtual time, through ${engineNames[body.scenario.engine]}, in ${ms} ms`;
  history.replaceState(null, '', address(body.scenario));
  // The downloads: the server runs the same scenario again (the clock is
  // virtual, so it replies alike).
  $('#csv').href = `api/result.csv${query(body.scenario)}`;
  $('#svg').href = `api/chart.svg${query(body.scenario)}`;
  $('#downloads').hidden = false;
  document.body.dataset.ran = 'yes';
  document.body.dataset.runs = Number(document.body.dataset.runs || 0) + 1;
}

// showClients fills the per-client table: for each algorithm, Jain's index
// and each client's share of what it admitted, with its admitted and
// offered requests; hidden with one client.
function showClients(body) {
  const section = $('#clients');
  const n = body.scenario.clients;
  section.hidden = n < 2;
  if (n < 2) return;
  $('#clients-keys').textContent = body.scenario.keys === 'shared' ? 'all on one key per algorithm' : 'each on a key of its own';
  const head = $('#clients thead tr');
  head.replaceChildren();
  const th = (text) => {
    const h = document.createElement('th');
    h.textContent = text;
    head.appendChild(h);
  };
  th('Algorithm');
  th("Jain's index");
  for (let c = 0; c < n; c++) th(c === 0 ? 'Client 1 (noisy)' : `Client ${c + 1}`);
  const tbody = $('#clients tbody');
  tbody.replaceChildren();
  const offered = body.series[0].clients.map((cl) => cl.offered);
  const sum = offered.reduce((a, b) => a + b, 0);
  const row0 = document.createElement('tr');
  row0.className = 'offered';
  cell(row0, 'share of requests');
  cell(row0, '');
  for (const o of offered) cell(row0, `${sum ? (100 * o / sum).toFixed(1) : '0.0'} %`, 'num').title = `${o} requests`;
  tbody.appendChild(row0);
  for (const se of body.series) {
    const row = document.createElement('tr');
    row.dataset.algorithm = se.name;
    cell(row, se.name);
    cell(row, se.jain.toFixed(3), 'num').dataset.field = 'jain';
    se.clients.forEach((cl, c) => {
      const td = cell(row, `${cl.share.toFixed(1)} %`, 'num');
      td.dataset.client = c;
      const small = document.createElement('small');
      small.textContent = `${cl.admitted}/${cl.offered}`;
      td.append(document.createElement('br'), small);
      td.title = `${cl.admitted} of its ${cl.offered} requests admitted; its max-min fair share ${cl.fair}`;
    });
    tbody.appendChild(row);
  }
}

// placeholders shows, in the empty burst and lease controls, the values
// they then take: the limit; the hold rounded up, plus 1 s.
function placeholders() {
  const s = scenario();
  $('#scenario [name="burst"]').placeholder = s.limit;
  $('#scenario [name="lease"]').placeholder = Math.ceil(s.hold) + 1;
}

// Every change of a control reruns the scenario, 300 ms after the last.
function rerun() {
  placeholders();
  clearTimeout(debounce);
  debounce = setTimeout(run, 300);
}

async function live(count) {
  const s = scenario();
  const chosen = algorithms.filter((a) => $(`#algo-${a.i}`).checked);
  for (const a of chosen) {
    const resp = await fetch('api/live', {
      method: 'POST', headers: {'Content-Type': 'application/json'},
      body: JSON.stringify({command: a.command, count, limit: s.limit, window: s.window, hold: s.hold, burst: s.burst, lease: s.lease}),
    });
    const body = await resp.json();
    if (!resp.ok) {
      $('#status').className = 'error';
      $('#status').textContent = body.error;
      return;
    }
    for (const r of body.replies) {
      const row = document.createElement('tr');
      cell(row, new Date(r.at).toLocaleTimeString());
      cell(row, a.name);
      cell(row, r.limited ? 'refused' : 'admitted', r.limited ? 'refused' : 'admitted');
      cell(row, r.remaining, 'num');
      cell(row, r.retry_after, 'num');
      cell(row, r.reset_after, 'num');
      $('#replies tbody').prepend(row);
    }
  }
  const rows = $('#replies tbody').rows;
  while (rows.length > 200) rows[rows.length - 1].remove();
}

async function init() {
  const resp = await fetch('api/defaults');
  const d = await resp.json();
  const options = (select, values, names) => {
    for (const v of values) {
      const o = document.createElement('option');
      o.value = v;
      o.textContent = (names && names[v]) || v;
      $(select).appendChild(o);
    }
  };
  options('#pattern', d.patterns);
  options('#retry', d.retries, retryNames);
  options('#keys', d.keys, keyNames);
  options('#engine', d.engines, engineNames);
  $('#clients-input').max = d.max_clients;
  $('#scenario [name="burst"]').max = d.max_burst;
  $('#scenario [name="lease"]').max = d.max_lease;
  $('#noisy').textContent = d.noisy_factor;
  // An address with settings (as run leaves it) restores them; anything
  // else in the query (?autorun, from before the page ran on load) is
  // ignored.
  const params = new URLSearchParams(location.search);
  for (const k of fields) {
    const v = params.get(k);
    const input = $(`#scenario [name="${k}"]`);
    if (v !== null && input) input.value = v;
  }
  placeholders();
  const ids = {};
  for (const a of d.algorithms) ids[a.ID] = a.Name;
  options('#compare-a', Object.keys(ids), ids);
  options('#compare-b', Object.keys(ids), ids);
  const [ca, cb] = (params.get('compare') || '').split(',');
  if (ca in ids && cb in ids) {
    $('#compare-a').value = ca;
    $('#compare-b').value = cb;
  }
  algorithms = d.algorithms.map((a, i) => ({name: a.Name, command: a.Command, i}));
  for (const a of algorithms) {
    const label = document.createElement('label');
    label.innerHTML = `<input type="checkbox" id="algo-${a.i}" ${a.i < 2 ? 'checked' : ''}> ${a.name} `;
    $('#algorithms').appendChild(label);
  }
  $('#scenario').addEventListener('submit', run);
  $('#scenario').addEventListener('input', rerun); // typing, and picking a pattern
  $('#one').addEventListener('click', () => live(1));
  $('#burst').addEventListener('click', () => live(10));
  $('#steady').addEventListener('click', () => {
    if (steadyTimer) {
      clearInterval(steadyTimer);
      steadyTimer = null;
      $('#steady').textContent = 'Start a steady 2/s';
    } else {
      steadyTimer = setInterval(() => live(1), 500);
      $('#steady').textContent = 'Stop';
    }
  });
  $('#reset').addEventListener('click', async () => {
    await fetch('api/live/reset', {method: 'POST'});
    $('#replies tbody').replaceChildren();
  });
  await run(); // the page opens on a result
}

init();
