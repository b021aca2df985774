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
    hold: Number(f.get('hold')),
    seed: Number(f.get('seed')),
  };
}

function cell(row, text, cls) {
  const td = document.createElement('td');
  td.textContent = text;
  if (cls) td.className = cls;
  row.appendChild(td);
  return td;
}

async function run(event) {
  if (event) event.preventDefault();
  const status = $('#status');
  status.className = '';
  status.textContent = 'running…';
  const started = performance.now();
  const resp = await fetch('api/simulate', {
    method: 'POST', headers: {'Content-Type': 'application/json'}, body: JSON.stringify(scenario()),
  });
  const body = await resp.json();
  if (!resp.ok) {
    status.className = 'error';
    status.textContent = body.error;
    return;
  }
  $('#chart').innerHTML = body.svg;
  const tbody = $('#totals tbody');
  tbody.replaceChildren();
  for (const s of body.series) {
    const row = document.createElement('tr');
    row.dataset.algorithm = s.name;
    cell(row, s.name);
    cell(row, s.total[0], 'num admitted').dataset.field = 'admitted';
    cell(row, s.total[1], 'num refused').dataset.field = 'refused';
    cell(row, s.bound ? s.most_in : '—', 'num').dataset.field = 'most';
    cell(row, s.expected);
    tbody.appendChild(row);
  }
  const ms = Math.round(performance.now() - started);
  status.textContent = `${body.requests} requests × ${body.series.length} algorithms over ${body.scenario.duration} s of virtual time, in ${ms} ms`;
  document.body.dataset.ran = 'yes';
}

async function live(count) {
  const s = scenario();
  const chosen = algorithms.filter((a) => $(`#algo-${a.i}`).checked);
  for (const a of chosen) {
    const resp = await fetch('api/live', {
      method: 'POST', headers: {'Content-Type': 'application/json'},
      body: JSON.stringify({command: a.command, count, limit: s.limit, window: s.window, hold: s.hold}),
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
  for (const p of d.patterns) {
    const o = document.createElement('option');
    o.value = o.textContent = p;
    $('#pattern').appendChild(o);
  }
  const params = new URLSearchParams(location.search);
  for (const [k, v] of params) {
    const input = $(`#scenario [name="${k}"]`);
    if (input) input.value = v;
  }
  algorithms = d.algorithms.map((a, i) => ({name: a.Name, command: a.Command, i}));
  for (const a of algorithms) {
    const label = document.createElement('label');
    label.innerHTML = `<input type="checkbox" id="algo-${a.i}" ${a.i < 2 ? 'checked' : ''}> ${a.name} `;
    $('#algorithms').appendChild(label);
  }
  $('#scenario').addEventListener('submit', run);
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
  if (params.get('autorun') !== null) await run();
}

init();
