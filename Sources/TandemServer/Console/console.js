// The Tandem console: a client of this server's HTTP API and stream, like any other. It reaches
// nothing but the server it came from (the server's content security policy says so too).
'use strict';
(() => {

// MARK: Values

// A number as the server wrote it, so an integer stays an integer, a double a double, and an
// integer past 2^53 keeps every digit.
class Num {
  constructor(source) { this.source = source; }
  get isInteger() { return /^-?\d+$/.test(this.source); }
  get value() { return Number(this.source); }
  toString() { return this.source; }
}

function parseJSON(text) {
  return JSON.parse(text, (key, value, context) =>
    typeof value === 'number' ? new Num(context && context.source !== undefined ? context.source : String(value)) : value);
}

// JSON text for a value holding Nums, as compact as the server writes it.
function encode(value) {
  if (value instanceof Num) return value.source;
  if (value === null || value === undefined) return 'null';
  if (Array.isArray(value)) return '[' + value.map(encode).join(',') + ']';
  if (typeof value === 'object') return '{' + Object.keys(value).map(k => JSON.stringify(k) + ':' + encode(value[k])).join(',') + '}';
  return JSON.stringify(value);
}

function typeName(value) {
  if (value === null) return 'null';
  if (value instanceof Num) return value.isInteger ? 'integer' : 'double';
  if (Array.isArray(value)) return 'array';
  if (typeof value === 'object') return 'map';
  if (typeof value === 'boolean') return 'boolean';
  return 'string';
}

function isMap(value) { return value !== null && typeof value === 'object' && !Array.isArray(value) && !(value instanceof Num); }

// The order of query values: type first, then the value; strings by code point (UTF-8 order).
const typeRank = { null: 0, boolean: 1, integer: 2, double: 2, string: 3, array: 4, map: 5 };
function compareValues(a, b) {
  if (a === undefined || b === undefined) return (a === undefined ? 0 : 1) - (b === undefined ? 0 : 1);
  const ra = typeRank[typeName(a)], rb = typeRank[typeName(b)];
  if (ra !== rb) return ra - rb;
  if (a instanceof Num) return a.value - b.value;
  if (typeof a === 'boolean') return (a ? 1 : 0) - (b ? 1 : 0);
  if (typeof a === 'string') return compareText(a, b);
  if (Array.isArray(a)) {
    for (let i = 0; i < Math.min(a.length, b.length); i++) { const c = compareValues(a[i], b[i]); if (c) return c; }
    return a.length - b.length;
  }
  return compareText(encode(a), encode(b));
}
function compareText(a, b) {
  const x = Array.from(a), y = Array.from(b);
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    const d = x[i].codePointAt(0) - y[i].codePointAt(0);
    if (d) return d;
  }
  return x.length - y.length;
}

// MARK: Field paths, as the server writes them: dots between keys, a key with a dot, a backtick
// or a backslash quoted in backticks.
function quoteKey(key) {
  if (!/[.`\\]/.test(key)) return key;
  return '`' + key.replace(/[`\\]/g, c => '\\' + c) + '`';
}
function fieldPath(keys) { return keys.map(quoteKey).join('.'); }
function splitFieldPath(text) {
  const keys = []; let key = '', quoted = false, escaped = false, wasQuoted = false;
  for (const c of text) {
    if (escaped) { key += c; escaped = false; }
    else if (quoted && c === '\\') escaped = true;
    else if (c === '`') { quoted = !quoted; wasQuoted = true; }
    else if (c === '.' && !quoted) { keys.push(key); key = ''; wasQuoted = false; }
    else key += c;
  }
  if (quoted) throw new Error(`The field path ${text} has an unterminated backtick.`);
  keys.push(key);
  if (keys.some(k => k === '')) throw new Error(`The field path '${text}' has an empty key.`);
  return keys;
}
function valueAt(data, keys) {
  let value = data;
  for (const key of keys) {
    if (!isMap(value) || !(key in value)) return undefined;
    value = value[key];
  }
  return value;
}

// MARK: Paths and links

function segments(path) { return path.split('/').filter(s => s !== ''); }
function link(kind, path) { return '#/' + kind + '/' + segments(path).map(encodeURIComponent).join('/'); }
function documentURL(path) { return '/v1/documents/' + segments(path).map(encodeURIComponent).join('/'); }

// MARK: The server

const state = {
  token: sessionStorage.getItem('tandem.token'),
  health: null,
  cleanup: [],
};

class APIError extends Error {
  constructor(code, message, status, reason) { super(message); this.code = code; this.status = status; this.reason = reason; }
}

async function api(method, path, body) {
  const headers = {};
  if (state.token) headers['Authorization'] = 'Bearer ' + state.token;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let response;
  try {
    response = await fetch(path, { method, headers, body, cache: 'no-store' });
  } catch (error) {
    throw new APIError('unavailable', 'The server did not answer (' + error.message + '). Is it running?', 0);
  }
  const text = await response.text();
  if (response.ok && !(response.headers.get('content-type') || '').startsWith('application/json')) return text;
  let value = null;
  try { value = text ? parseJSON(text) : null; } catch (_) { value = null; }
  if (!response.ok) {
    const error = value && value.error;
    throw new APIError(error ? error.code : 'unknown', error ? error.message : `HTTP ${response.status}`, response.status, error && error.reason);
  }
  return value;
}

// The stream (`/v1/stream`): one WebSocket for the page's listeners, reconnecting with backoff
// when it drops (a server restart), each listener resuming from the version it last applied.
class Stream {
  constructor() {
    this.listeners = new Map();
    this.nextID = 1;
    this.socket = null;
    this.ready = false;
    this.delay = 200;
    this.heartbeat = null;
    this.retry = null;
  }

  clientID() {
    let id = sessionStorage.getItem('tandem.client');
    if (!id) {
      const bytes = new Uint8Array(12); crypto.getRandomValues(bytes);
      id = 'console-' + Array.from(bytes, b => b.toString(16).padStart(2, '0')).join('');
      sessionStorage.setItem('tandem.client', id);
    }
    return id;
  }

  connect() {
    if (this.socket || this.retry) return;
    showLive('connecting');
    const socket = new WebSocket((location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/v1/stream');
    this.socket = socket;
    socket.onopen = () => {
      const hello = { type: 'hello', clientId: this.clientID(), protocol: 3 };
      if (state.token) hello.token = state.token;
      socket.send(encode(hello));
    };
    socket.onmessage = event => {
      let message;
      try { message = parseJSON(event.data); } catch (_) { return; }
      this.receive(message);
    };
    socket.onclose = () => {
      if (this.socket !== socket) return;
      this.socket = null; this.ready = false;
      clearInterval(this.heartbeat);
      if (this.listeners.size === 0) { showLive('idle'); return; }
      showLive('reconnecting');
      this.retry = setTimeout(() => { this.retry = null; this.connect(); }, this.delay);
      this.delay = Math.min(this.delay * 2, 3000);
    };
  }

  // Reconnects now (after the token changed): the listeners resume on the new connection.
  restart() {
    const socket = this.socket;
    this.socket = null; this.ready = false;
    clearInterval(this.heartbeat);
    if (socket) socket.close();
    if (this.listeners.size) this.connect();
  }

  send(message) { if (this.socket && this.socket.readyState === WebSocket.OPEN) this.socket.send(encode(message)); }

  receive(message) {
    switch (message.type) {
    case 'welcome': {
      this.ready = true; this.delay = 200;
      showLive('live');
      const seconds = message.heartbeatSeconds ? message.heartbeatSeconds.value : 10;
      this.heartbeat = setInterval(() => this.send({ type: 'heartbeat' }), seconds * 1000);
      for (const listener of this.listeners.values()) this.sendListen(listener);
      break;
    }
    case 'snapshot': case 'changes': {
      const ids = message.targets ? message.targets.map(t => t.value) : [message.target.value];
      for (const id of ids) {
        const listener = this.listeners.get(id);
        if (!listener) continue;
        if (message.type === 'snapshot') { listener.snapshot = true; listener.pending = []; }
        listener.pending.push(...message.changes);
        if (message.more) continue;
        const batch = { snapshot: listener.snapshot, changes: listener.pending, version: message.version };
        listener.pending = []; listener.snapshot = false;
        listener.version = message.version;
        listener.onBatch(batch);
      }
      break;
    }
    case 'error': {
      if (message.id !== undefined) {
        const listener = this.listeners.get(message.id.value);
        if (listener) { this.listeners.delete(listener.id); listener.onError(message); }
      } else if (message.reason === 'token-expired') {
        showAccessProblem('Your token expired: paste a fresh one.');
      }
      break;
    }
    }
  }

  sendListen(listener) {
    const message = { type: 'listen', id: new Num(String(listener.id)), target: listener.target };
    if (listener.resume && listener.version) message.resumeFrom = listener.version;
    this.send(message);
  }

  // Listens to `target` until the function returned is called. `resume`: reconnect with
  // `resumeFrom` (not for a query with a limit, which starts with a snapshot anyway).
  listen(target, resume, onBatch, onError) {
    const listener = { id: this.nextID++, target, resume, version: null, onBatch, onError, pending: [], snapshot: false };
    this.listeners.set(listener.id, listener);
    if (this.ready) this.sendListen(listener); else this.connect();
    return () => {
      if (!this.listeners.delete(listener.id)) return;
      if (this.ready) this.send({ type: 'unlisten', id: new Num(String(listener.id)) });
    };
  }
}

const stream = new Stream();

// MARK: Rendering

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith('on')) node.addEventListener(name.slice(2), value);
    else if (name === 'text') node.textContent = value;
    // Through the CSSOM: the content security policy refuses style attributes.
    else if (name === 'style') Object.assign(node.style, value);
    else node.setAttribute(name, value === true ? '' : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function showLive(status) {
  const live = document.getElementById('live');
  const text = { idle: 'not listening', connecting: 'connecting…', live: 'live', reconnecting: 'reconnecting…' }[status];
  live.textContent = text;
  live.className = 'live ' + (status === 'live' ? 'live-on' : status);
  live.dataset.status = status;
}

function showError(target, error) {
  target.replaceChildren(el('div', { class: 'error', 'data-code': error.code || 'error' }, error.code ? `${error.code}: ${error.message}` : String(error.message || error)));
}

function crumbs(path, kind = 'data') {
  const parts = segments(path);
  const nodes = [el('a', { href: '#/data/' }, 'root')];
  parts.forEach((part, i) => {
    nodes.push(' / ');
    nodes.push(el('a', { href: link(kind, parts.slice(0, i + 1).join('/')) }, part));
  });
  return el('div', { class: 'crumbs' }, nodes);
}

function timeText(text) { return text ? text.replace('T', ' ').replace('Z', ' UTC') : ''; }

function shellQuote(text) { return /^[\w@%+=:,./-]+$/.test(text) ? text : "'" + text.replace(/'/g, "'\\''") + "'"; }

// MARK: Access

function tokenClaims(token) {
  try {
    const part = token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
    return JSON.parse(decodeURIComponent(Array.from(atob(part), c => '%' + c.charCodeAt(0).toString(16).padStart(2, '0')).join('')));
  } catch (_) { return null; }
}

function setToken(token) {
  state.token = token || null;
  if (state.token) sessionStorage.setItem('tandem.token', state.token); else sessionStorage.removeItem('tandem.token');
  renderAccess();
  stream.restart();
  route();
}

function showAccessProblem(message) {
  renderAccess();
  document.getElementById('access').prepend(el('span', { class: 'error' }, message));
}

function renderAccess() {
  const access = document.getElementById('access');
  const mode = state.health ? state.health.access : 'open';
  if (mode === 'open') {
    access.replaceChildren(el('span', { id: 'access-mode', 'data-mode': 'open' }, 'Open server: no tokens, no rules — every caller reads and writes everything.'));
    return;
  }
  if (mode === 'rules') {
    access.replaceChildren(el('span', { id: 'access-mode', 'data-mode': 'rules' }, 'Rules without tokens: you browse as an anonymous caller.'));
    return;
  }
  if (state.token) {
    const claims = tokenClaims(state.token) || {};
    access.replaceChildren(...[
      el('span', { id: 'access-mode', 'data-mode': 'token' }, 'Signed in as ', el('strong', { id: 'signed-in-as' }, String(claims.sub || '?'))),
      claims.admin === true ? el('span', { class: 'pill' }, 'admin') : null,
      el('button', { id: 'sign-out', onclick: () => setToken(null) }, 'Sign out')].filter(node => node));
    return;
  }
  const input = el('input', { id: 'token-input', type: 'password', placeholder: 'a bearer token', autocomplete: 'off' });
  access.replaceChildren(el('form', { class: 'row', id: 'token-form', onsubmit: event => { event.preventDefault(); setToken(input.value.trim()); } },
    el('span', { id: 'access-mode', 'data-mode': 'token' }, 'This server needs a token:'), input, el('button', { class: 'primary' }, 'Sign in')));
}

// MARK: Pages

const main = () => document.getElementById('main');

function onLeave(cleanup) { state.cleanup.push(cleanup); }

async function rootPage() {
  const list = el('ul', { class: 'list', id: 'collections' });
  const go = el('input', { type: 'text', class: 'wide', id: 'goto', placeholder: 'a path: users, or users/ada' });
  main().replaceChildren(
    el('h1', {}, 'Collections'),
    el('form', { class: 'row', onsubmit: event => { event.preventDefault(); if (go.value.trim()) location.hash = link('data', go.value.trim()); } },
      go, el('button', {}, 'Open')),
    list);
  try {
    const answer = await api('GET', '/v1/collections');
    if (answer.collections.length === 0) {
      list.replaceChildren(el('li', { class: 'quiet' }, state.health && state.health.access !== 'open'
        ? 'No collection you may list. Open a path you may read above.'
        : 'No collections yet. Write one: tandem set notes/hello \'{"text": "Hi"}\''));
    } else {
      list.replaceChildren(...answer.collections.map(id => el('li', {}, el('a', { href: link('data', id), 'data-collection': id }, id))));
    }
  } catch (error) { showError(list, error); }
}

async function groupsPage() {
  const list = el('ul', { class: 'list', id: 'groups' });
  main().replaceChildren(el('h1', {}, 'Collection groups'),
    el('p', { class: 'quiet' }, 'A group is every collection with the same id, wherever it is.'), list);
  try {
    const answer = await api('GET', '/v1/groups');
    list.replaceChildren(...(answer.groups.length ? answer.groups.map(group => el('li', {}, el('a', { href: '#/groups/' + encodeURIComponent(group), 'data-group': group }, group)))
      : [el('li', { class: 'quiet' }, 'No groups you may list.')]));
  } catch (error) { showError(list, error); }
}

// The query of a collection page, kept while the page is open again.
const queries = new Map();

const operators = ['==', '!=', '<', '<=', '>', '>=', 'array-contains', 'array-contains-any', 'in', 'not-in'];

// `field op value` as `tandem query --where` takes it: the value is JSON when it is JSON, else
// text. Several filters are separated by `;` outside double quotes.
function parseFilters(text) {
  const filters = []; let current = '', quoted = false, escaped = false;
  for (const c of text) {
    if (escaped) { escaped = false; current += c; continue; }
    if (c === '\\' && quoted) { escaped = true; current += c; continue; }
    if (c === '"') quoted = !quoted;
    if (c === ';' && !quoted) { filters.push(current); current = ''; continue; }
    current += c;
  }
  filters.push(current);
  return filters.map(f => f.trim()).filter(f => f).map(filter => {
    const match = /^(\S+)\s+(\S+)\s+(.+)$/.exec(filter);
    if (!match) throw new Error(`The filter '${filter}' needs three parts, 'field op value', such as 'age >= 18'.`);
    if (!operators.includes(match[2])) throw new Error(`Unknown operator '${match[2]}' in '${filter}'; use one of: ${operators.join(' ')}.`);
    splitFieldPath(match[1]);
    let value;
    try { value = parseJSON(match[3]); } catch (_) { value = match[3]; }
    return { text: filter, operation: { where: match[1], op: match[2], value } };
  });
}

function collectionPage(path, group) {
  const key = (group ? 'group:' : '') + path;
  const query = queries.get(key) || { where: '', order: '', shown: 25 };
  queries.set(key, query);
  const where = el('input', { type: 'text', class: 'wide', id: 'where', placeholder: 'filters: age >= 18; tags array-contains "new"', value: query.where });
  const order = el('input', { type: 'text', id: 'order', placeholder: 'order by: age or age:desc', value: query.order });
  const cli = el('pre', { class: 'cli', id: 'cli' });
  const problem = el('div', { id: 'problem' });
  const body = el('tbody', { id: 'documents' });
  const more = el('button', { id: 'more', hidden: true, onclick: () => { query.shown += 25; start(); } }, 'Show more');
  const count = el('span', { class: 'quiet', id: 'count' });
  main().replaceChildren(
    group ? el('div', { class: 'crumbs' }, el('a', { href: '#/groups' }, 'groups')) : crumbs(path),
    el('h1', {}, group ? `Every collection named ${path}` : path),
    el('form', { class: 'row', id: 'query-form', onsubmit: event => { event.preventDefault(); query.where = where.value; query.order = order.value; query.shown = 25; start(); } },
      where, order, el('button', { class: 'primary', id: 'run' }, 'Run')),
    cli, problem,
    el('table', {}, el('thead', {}, el('tr', {}, el('th', {}, group ? 'Document' : 'ID'), el('th', {}, 'Version'), el('th', {}, 'Updated'), el('th', {}, 'Data'))), body),
    el('div', { class: 'row' }, more, count));

  const documents = new Map();
  let stop = null;
  let orderKeys = null, descending = false;

  function render(changed) {
    const rows = Array.from(documents.values());
    rows.sort((a, b) => {
      if (orderKeys) {
        const c = compareValues(valueAt(a.data, orderKeys), valueAt(b.data, orderKeys));
        if (c) return descending ? -c : c;
      }
      return compareText(a.path, b.path) * (orderKeys && descending ? -1 : 1);
    });
    const shown = rows.slice(0, query.shown);
    body.replaceChildren(...shown.map(document => el('tr', { 'data-path': document.path, class: changed.has(document.path) ? 'changed' : null },
      el('td', {}, el('a', { href: link('data', document.path) }, group ? document.path : segments(document.path).pop())),
      el('td', { class: 'version' }, document.version.source),
      el('td', {}, timeText(document.updateTime)),
      el('td', { class: 'preview', title: encode(document.data) }, encode(document.data)))));
    if (shown.length === 0) body.replaceChildren(el('tr', {}, el('td', { colspan: 4, class: 'quiet' }, 'No documents match.')));
    more.hidden = rows.length <= query.shown;
    count.textContent = `${shown.length} shown`;
  }

  function start() {
    if (stop) stop();
    problem.replaceChildren();
    documents.clear();
    let operations;
    try {
      const filters = parseFilters(query.where);
      operations = filters.map(f => f.operation);
      const command = ['tandem', 'query', shellQuote(path)];
      if (group) command.push('--group');
      for (const filter of filters) command.push('--where', shellQuote(filter.text));
      orderKeys = null; descending = false;
      const orderText = query.order.trim();
      if (orderText) {
        descending = orderText.endsWith(':desc');
        const field = orderText.replace(/:(desc|asc)$/, '');
        orderKeys = splitFieldPath(field);
        operations.push({ orderBy: field, descending });
        command.push('--order-by', shellQuote(orderText));
      }
      operations.push({ limit: new Num(String(query.shown + 1)) });
      command.push('--limit', String(query.shown));
      if (location.origin !== 'http://127.0.0.1:8080') command.push('--url', location.origin);
      cli.textContent = command.join(' ');
    } catch (error) {
      showError(problem, error);
      return;
    }
    const target = group ? { group: path, query: operations } : { collection: path, query: operations };
    let first = true;
    stop = stream.listen(target, false, batch => {
      const changed = new Set();
      if (batch.snapshot) {
        const before = new Map(documents);
        documents.clear();
        for (const change of batch.changes) {
          if (!change.document) continue;
          documents.set(change.path, change.document);
          const old = before.get(change.path);
          if (!first && (!old || old.version.source !== change.document.version.source)) changed.add(change.path);
        }
      } else {
        for (const change of batch.changes) {
          if (change.document) { documents.set(change.path, change.document); changed.add(change.path); }
          else documents.delete(change.path);
        }
      }
      first = false;
      render(changed);
      main().dataset.version = batch.version.source;
    }, error => showError(problem, error));
  }

  start();
  onLeave(() => { if (stop) stop(); });
}

function documentPage(path) {
  const meta = el('dl', { class: 'meta', id: 'meta' });
  const notice = el('div', { id: 'notice' });
  const fields = el('tbody', { id: 'fields' });
  const subcollections = el('ul', { class: 'list', id: 'subcollections' });
  const actions = el('div', { id: 'document-actions' });
  main().replaceChildren(crumbs(path), el('h1', {}, segments(path).pop()), meta, notice,
    el('table', {}, el('thead', {}, el('tr', {}, el('th', {}, 'Field'), el('th', {}, 'Type'), el('th', {}, 'Value'), el('th', {}))), fields),
    actions, el('h2', {}, 'Collections under this document'), subcollections);

  let current = null;
  let loaded = false;
  // While a field is edited the page keeps the version it showed: a change that arrives meanwhile
  // is announced and kept in `latest`, and saving is refused by the version precondition.
  let editing = false;
  let latest;

  function say(kind, text) { notice.replaceChildren(el('div', { class: kind, 'data-kind': kind }, text)); }

  async function write(method, query, body, done) {
    try {
      const answer = await api(method, documentURL(path) + query, body);
      editing = false; latest = undefined;
      if (answer && answer.data) show(answer, new Set());
      say('notice', done + (answer && answer.version ? ` (version ${answer.version.source}).` : '.'));
    } catch (error) {
      if (error.code === 'failed-precondition' || error.code === 'not-found') {
        editing = false;
        if (latest !== undefined) { show(latest, new Set()); latest = undefined; }
        say('error', `Not saved: the document changed since this page showed it (${error.message}). Nothing was overwritten; the page shows it as it is now.`);
      } else {
        say('error', `${error.code}: ${error.message}`);
      }
    }
  }

  function update(keys, rawValue, done) {
    write('PATCH', `?version=${current.version.source}`, '{' + JSON.stringify(fieldPath(keys)) + ':' + rawValue + '}', done);
  }

  function fieldRows(data, prefix, depth, changed, editable) {
    const rows = [];
    for (const key of Object.keys(data)) {
      const keys = prefix.concat([key]);
      const name = fieldPath(keys);
      const value = data[key];
      const composite = isMap(value) || Array.isArray(value);
      const valueCell = el('td', { class: 'value' }, composite ? (Array.isArray(value) ? `${value.length} items` : '') : encode(value));
      const row = el('tr', { 'data-field': name, class: changed.has(keys[0]) ? 'changed' : null },
        el('td', { style: { paddingLeft: `${8 + depth * 18}px` } }, key),
        el('td', { class: 'type' }, typeName(value)),
        valueCell,
        el('td', { class: 'actions' }, editable ? [
          el('button', { class: 'link edit', onclick: () => edit(valueCell, keys, value) }, 'edit'),
          el('button', { class: 'link danger remove', onclick: () => update(keys, '{"$delete":true}', `Deleted ${name}`) }, 'delete'),
        ] : []));
      rows.push(row);
      if (isMap(value)) rows.push(...fieldRows(value, keys, depth + 1, changed, editable));
      else if (Array.isArray(value)) {
        value.forEach((item, index) => {
          rows.push(el('tr', { class: changed.has(keys[0]) ? 'changed' : null },
            el('td', { style: { paddingLeft: `${8 + (depth + 1) * 18}px` }, class: 'quiet' }, String(index)),
            el('td', { class: 'type' }, typeName(item)), el('td', { class: 'value' }, encode(item)), el('td', {})));
        });
      }
    }
    return rows;
  }

  function edit(cell, keys, value) {
    editing = true;
    const input = el('input', { type: 'text', class: 'wide edit-value', value: encode(value) });
    cell.replaceChildren(el('form', { class: 'row', onsubmit: event => {
      event.preventDefault();
      try { parseJSON(input.value); } catch (_) { say('error', 'The value must be JSON: "text" in quotes, 12, 1.5, true, null, [..] or {..}.'); return; }
      update(keys, input.value, `Saved ${fieldPath(keys)}`);
    } }, input, el('button', { class: 'primary save' }, 'Save'), el('button', { type: 'button', class: 'cancel', onclick: () => {
      editing = false;
      const shown = latest !== undefined ? latest : current;
      latest = undefined; notice.replaceChildren();
      show(shown, new Set());
    } }, 'Cancel')));
    input.focus();
  }

  function show(document, changed) {
    current = document;
    main().dataset.version = document ? document.version.source : '0';
    if (!document) {
      actions.dataset.mode = 'create';
      meta.replaceChildren(el('dt', {}, 'Path'), el('dd', { class: 'mono' }, path), el('dt', {}, 'Status'), el('dd', { id: 'missing' }, 'No document here (or none you may read).'));
      fields.replaceChildren();
      const body = el('textarea', { id: 'create-body', rows: 3, cols: 60 }, '{}');
      actions.replaceChildren(el('form', { class: 'row', onsubmit: event => {
        event.preventDefault();
        try { if (!isMap(parseJSON(body.value))) throw 0; } catch (_) { say('error', 'The body must be a JSON object.'); return; }
        write('PUT', '?exists=false', body.value, 'Created');
      } }, body, el('button', { class: 'primary', id: 'create' }, 'Create document')));
      return;
    }
    meta.replaceChildren(
      el('dt', {}, 'Path'), el('dd', { class: 'mono' }, document.path),
      el('dt', {}, 'Version'), el('dd', { id: 'version' }, document.version.source),
      el('dt', {}, 'Created'), el('dd', {}, timeText(document.createTime)),
      el('dt', {}, 'Updated'), el('dd', { id: 'updated' }, timeText(document.updateTime)));
    fields.replaceChildren(...fieldRows(document.data, [], 0, changed, true));
    if (Object.keys(document.data).length === 0) fields.replaceChildren(el('tr', {}, el('td', { colspan: 4, class: 'quiet' }, 'No fields.')));
    // The forms stay as they are while the document changes under them (what is typed is kept).
    if (actions.dataset.mode === 'edit') return;
    actions.dataset.mode = 'edit';
    const name = el('input', { type: 'text', id: 'new-field', placeholder: 'field (a.b for a nested one)' });
    const value = el('input', { type: 'text', id: 'new-value', class: 'wide', placeholder: 'value as JSON: "text", 12, true, {"a": 1}' });
    let confirming = false;
    const remove = el('button', { class: 'danger', id: 'delete-document', type: 'button', onclick: () => {
      if (!confirming) { confirming = true; remove.textContent = 'Delete it for good?'; return; }
      write('DELETE', `?version=${current.version.source}`, undefined, 'Deleted the document');
    } }, 'Delete document');
    actions.replaceChildren(el('form', { class: 'row', id: 'add-field', onsubmit: event => {
      event.preventDefault();
      let keys;
      try { keys = splitFieldPath(name.value.trim()); } catch (error) { say('error', error.message); return; }
      try { parseJSON(value.value); } catch (_) { say('error', 'The value must be JSON: "text" in quotes, 12, 1.5, true, null, [..] or {..}.'); return; }
      update(keys, value.value, `Added ${fieldPath(keys)}`);
    } }, name, value, el('button', { class: 'primary', id: 'add' }, 'Add field')), remove);
  }

  async function loadSubcollections() {
    try {
      const answer = await api('GET', '/v1/collections?parent=' + encodeURIComponent(path));
      subcollections.replaceChildren(...(answer.collections.length
        ? answer.collections.map(id => el('li', {}, el('a', { href: link('data', path + '/' + id) }, id)))
        : [el('li', { class: 'quiet' }, 'None.')]));
    } catch (error) { showError(subcollections, error); }
  }

  const stop = stream.listen({ document: path }, true, batch => {
    const change = batch.changes.find(c => c.path === path);
    if (!change && !batch.snapshot) return;
    const document = change ? change.document : null;
    const changed = new Set();
    if (loaded && current && document) {
      for (const key of new Set([...Object.keys(current.data), ...Object.keys(document.data)])) {
        if (encode(current.data[key]) !== encode(document.data[key])) changed.add(key);
      }
    }
    loaded = true;
    if (editing) {
      const same = current && document && current.version.source === document.version.source;
      if (!same) {
        latest = document;
        say('stale', document ? `The document changed (version ${document.version.source}) while you edit: saving now is refused and overwrites nothing. Cancel to see it.`
                              : 'The document was deleted while you edit: saving now is refused. Cancel to see it.');
      }
      return;
    }
    if (!current || !document || current.version.source !== document.version.source || batch.snapshot) show(document, changed);
  }, error => showError(notice, error));
  onLeave(stop);
  loadSubcollections();
}

function metricValues(text) {
  const values = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][\w:]*)(?:\{([^}]*)\})?\s+(\S+)/.exec(line);
    if (!match) continue;
    const labels = {};
    for (const pair of (match[2] || '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[pair[1]] = pair[2];
    values.push({ name: match[1], labels, value: Number(match[3]) });
  }
  return values;
}

function duration(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  const d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60);
  return (d ? `${d}d ` : '') + (d || h ? `${h}h ` : '') + `${m}m ${s % 60}s`;
}

function bytes(count) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = count, unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit++; }
  return `${value.toFixed(unit ? 1 : 0)} ${units[unit]}`;
}

function serverPage() {
  const facts = el('dl', { class: 'meta', id: 'server-facts' });
  const errors = el('tbody', { id: 'errors' });
  const problem = el('div', { id: 'problem' });
  main().replaceChildren(el('h1', {}, 'Server'), facts, problem, el('h2', {}, 'Errors answered, by code'),
    el('table', {}, el('thead', {}, el('tr', {}, el('th', {}, 'Code'), el('th', {}, 'Answers'))), errors));
  let previous = null;
  async function refresh() {
    let health, text;
    try {
      health = await api('GET', '/health');
      text = await api('GET', '/metrics');
    } catch (error) {
      if (health) {
        facts.replaceChildren(el('dt', {}, 'Version'), el('dd', { id: 'server-version-fact' }, health.version));
        const hint = error.code === 'unauthenticated' || error.code === 'permission-denied'
          ? ' The metrics count every user\'s traffic: sign in with a token that has "admin": true (tandem token --sub ops --claim admin=true).' : '';
        problem.replaceChildren(el('div', { class: 'error', 'data-code': error.code }, `${error.code}: ${error.message}${hint}`));
      } else showError(problem, error);
      return;
    }
    problem.replaceChildren();
    const values = metricValues(text);
    const one = name => values.filter(v => v.name === name).reduce((sum, v) => sum + v.value, 0);
    const now = Date.now() / 1000;
    const commits = values.filter(v => v.name === 'tandem_commits_total' && v.labels.outcome === 'committed').reduce((s, v) => s + v.value, 0);
    const rate = previous ? ((commits - previous.commits) / Math.max(0.001, now - previous.time)).toFixed(1) : '…';
    previous = { commits, time: now };
    const fact = (name, id, value) => [el('dt', {}, name), el('dd', { id }, value)];
    facts.replaceChildren(
      ...fact('Version', 'server-version-fact', `${health.version} (protocol ${health.protocol.source})`),
      ...fact('Access', 'server-access', health.access),
      ...fact('Uptime', 'uptime', duration(now - one('tandem_start_time_seconds'))),
      ...fact('Connections', 'connections', String(one('tandem_stream_sessions'))),
      ...fact('Listeners', 'listeners', String(one('tandem_listeners'))),
      ...fact('Commits', 'commits', `${commits} (${rate}/s)`),
      ...fact('Database version', 'commit-version', String(one('tandem_commit_version'))),
      ...fact('Store size', 'store-size', bytes(one('tandem_store_bytes'))));
    const codes = values.filter(v => v.name === 'tandem_errors_total' && v.value > 0);
    codes.sort((a, b) => b.value - a.value || compareText(a.labels.code, b.labels.code));
    errors.replaceChildren(...codes.map(v => el('tr', { 'data-code': v.labels.code }, el('td', { class: 'mono' }, v.labels.code), el('td', {}, String(v.value)))));
    if (codes.length === 0) errors.replaceChildren(el('tr', {}, el('td', { colspan: 2, class: 'quiet' }, 'None yet.')));
  }
  refresh();
  const timer = setInterval(refresh, 2000);
  onLeave(() => clearInterval(timer));
}

// MARK: Routing: #/data/PATH (a collection or a document), #/groups[/NAME], #/server

function route() {
  for (const cleanup of state.cleanup.splice(0)) cleanup();
  const hash = location.hash.slice(1) || '/data/';
  const parts = hash.split('/').slice(1);
  const page = parts.shift();
  let path;
  try { path = parts.filter(p => p !== '').map(decodeURIComponent).join('/'); } catch (_) { path = ''; }
  for (const name of ['data', 'groups', 'server']) document.getElementById('nav-' + name).classList.toggle('current', name === page);
  main().dataset.page = page;
  if (page === 'server') serverPage();
  else if (page === 'groups') { if (path) collectionPage(path, true); else groupsPage(); }
  else if (!path) rootPage();
  else if (segments(path).length % 2 === 1) collectionPage(path, false);
  else documentPage(path);
}

async function start() {
  // A link from `tandem console` carries a token in the fragment, which browsers never send to
  // the server: kept for this tab, and taken out of the address bar.
  if (location.hash.startsWith('#token=')) {
    state.token = decodeURIComponent(location.hash.slice(7));
    sessionStorage.setItem('tandem.token', state.token);
    history.replaceState(null, '', location.pathname + '#/data/');
  }
  try {
    state.health = await api('GET', '/health');
    document.getElementById('server-version').textContent = `Tandem ${state.health.version}`;
  } catch (error) {
    showError(main(), error);
    return;
  }
  renderAccess();
  window.addEventListener('hashchange', route);
  route();
}

start();
})();
