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

// JSON text for a value holding Nums, two spaces a level, to edit.
function pretty(value, indent = '') {
  const inner = indent + '  ';
  if (Array.isArray(value)) {
    return value.length === 0 ? '[]' : '[\n' + value.map(item => inner + pretty(item, inner)).join(',\n') + '\n' + indent + ']';
  }
  if (isMap(value)) {
    const keys = Object.keys(value);
    return keys.length === 0 ? '{}' : '{\n' + keys.map(key => inner + JSON.stringify(key) + ': ' + pretty(value[key], inner)).join(',\n') + '\n' + indent + '}';
  }
  return encode(value);
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
  // The bearer token sent with every request: one this page has no reason to doubt (it decodes,
  // names a user and has not expired), on a server that takes tokens.
  token: null,
  // Whether the server took `token`: until it does, the page says it is signing in, not signed in.
  tokenAccepted: false,
  // Why there is no token to send when there was one: { kind: 'malformed' | 'refused' | 'expired',
  // message, who, exp }. Until another token is given, the page opens no stream.
  tokenProblem: null,
  expiryTimer: null,
  health: null,
  cleanup: [],
  // The fragment of the page shown, to come back to once a token taken from the fragment is
  // out of the address bar.
  shown: '#/data/',
};

function accessMode() { return state.health ? state.health.access : 'open'; }

class APIError extends Error {
  constructor(code, message, status, reason) { super(message); this.code = code; this.status = status; this.reason = reason; }
}

// Whether an answer to `path` other than `unauthenticated` says the server took the token: the
// API's and the metrics' do (`/health`, say, is answered whatever the token).
function authenticates(path) { return path.startsWith('/v1/') || path === '/metrics'; }

async function api(method, path, body) {
  const headers = {};
  const token = state.token;
  if (token) headers['Authorization'] = 'Bearer ' + token;
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
    const failure = new APIError(error ? error.code : 'unknown', error ? error.message : `HTTP ${response.status}`, response.status, error && error.reason);
    // With a token, `unauthenticated` is about the token itself (what a signed-in caller may not
    // do is `permission-denied`): refused, or expired.
    if (failure.code === 'unauthenticated' && token) tokenRefused(failure, token);
    else if (failure.code === 'permission-denied' && token && authenticates(path)) tokenAccepted(token);
    throw failure;
  }
  if (token && authenticates(path)) tokenAccepted(token);
  return value;
}

// The stream (`/v1/stream`): one WebSocket for the page's listeners, reconnecting with backoff
// when it drops (a server restart), each listener resuming from the version it last applied.
// While the token is known to be no good (refused, expired) it opens nothing.
class Stream {
  constructor() {
    this.listeners = new Map();
    this.nextID = 1;
    this.socket = null;
    // The token the socket said hello with: an `unauthenticated` error on it is about that one.
    this.token = null;
    // Welcomed: the socket is open and its listeners are sent.
    this.ready = false;
    // The last connection dropped: every attempt until a welcome is a reconnection.
    this.lost = false;
    this.reason = null;
    this.delay = 200;
    this.heartbeat = null;
    this.retry = null;
    this.heard = 0;
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
    if (state.tokenProblem) { showLive(); return; }
    const socket = new WebSocket((location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/v1/stream');
    this.socket = socket;
    this.token = state.token;
    socket.onopen = () => {
      if (this.socket !== socket) return;
      const hello = { type: 'hello', clientId: this.clientID(), protocol: 3 };
      if (this.token) hello.token = this.token;
      socket.send(encode(hello));
    };
    socket.onmessage = event => {
      if (this.socket !== socket) return;
      this.heard = Date.now();
      let message;
      try { message = parseJSON(event.data); } catch (_) { return; }
      this.receive(message);
    };
    socket.onclose = () => { if (this.socket === socket) this.drop(null); };
    showLive();
  }

  // Forgets the socket (its late events are ignored) and closes it.
  detach() {
    const socket = this.socket;
    this.socket = null; this.token = null; this.ready = false;
    clearInterval(this.heartbeat); this.heartbeat = null;
    if (!socket) return;
    // Closing one still connecting makes the browser log an error: it is closed once open.
    if (socket.readyState === WebSocket.CONNECTING) socket.onopen = () => socket.close();
    else socket.close();
  }

  // The connection is gone (closed, refused, or silent for three heartbeats): while anything
  // listens, reconnect with backoff.
  drop(reason) {
    this.detach();
    if (this.listeners.size > 0) {
      this.lost = true; this.reason = reason;
      clearTimeout(this.retry);
      this.retry = setTimeout(() => { this.retry = null; this.connect(); }, this.delay);
      this.delay = Math.min(this.delay * 2, 3000);
    } else {
      this.lost = false; this.reason = null;
    }
    showLive();
  }

  // Closes the connection and opens none until `restart` (the token is no good). The listeners
  // stay, to resume on the next connection.
  halt() {
    this.detach();
    clearTimeout(this.retry); this.retry = null;
    this.lost = false; this.reason = null;
    showLive();
  }

  // Reconnects now (after the token changed): the listeners resume on the new connection.
  restart() {
    this.halt();
    this.delay = 200;
    if (this.listeners.size) this.connect();
  }

  send(message) { if (this.socket && this.socket.readyState === WebSocket.OPEN) this.socket.send(encode(message)); }

  receive(message) {
    switch (message.type) {
    case 'welcome': {
      this.ready = true; this.lost = false; this.reason = null; this.delay = 200;
      if (this.token) tokenAccepted(this.token);
      const seconds = message.heartbeatSeconds ? message.heartbeatSeconds.value : 10;
      this.heartbeat = setInterval(() => {
        // A connection that said nothing for three intervals is dead, whatever its socket says.
        if (Date.now() - this.heard > 3 * seconds * 1000) { this.drop('the server stopped answering'); return; }
        this.send({ type: 'heartbeat' });
      }, seconds * 1000);
      for (const listener of this.listeners.values()) this.sendListen(listener);
      showLive();
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
      // With a token, `unauthenticated` is about the token: refused at hello, or expired since
      // (the server then stops every listener of the connection).
      if (message.code === 'unauthenticated' && this.token) {
        tokenRefused(message, this.token);
      } else if (message.id !== undefined) {
        const listener = this.listeners.get(message.id.value);
        if (listener) { this.listeners.delete(listener.id); listener.onError(message); showLive(); }
      } else if (!this.ready) {
        // The hello was refused for another reason (too many connections, say): try again.
        this.drop(message.message);
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
    if (this.ready) { this.sendListen(listener); showLive(); } else this.connect();
    return () => {
      if (!this.listeners.delete(listener.id)) return;
      if (this.ready) this.send({ type: 'unlisten', id: new Num(String(listener.id)) });
      showLive();
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

// The footer: "live" only while the stream is open, welcomed, and listening for this page;
// otherwise "not live" and why.
function showLive() {
  const live = document.getElementById('live');
  const problem = state.tokenProblem;
  let status, text;
  if (problem && problem.kind === 'expired') [status, text] = ['expired', 'not live: the token expired (paste a new one above)'];
  else if (problem) [status, text] = ['refused', problem.kind === 'malformed' ? 'not live: that was not a token (paste one above)' : 'not live: the token was refused (paste another above)'];
  else if (stream.ready) [status, text] = stream.listeners.size > 0 ? ['live', 'live'] : ['idle', 'not live: nothing on this page is watched'];
  else if (stream.lost) [status, text] = ['reconnecting', 'not live: reconnecting…' + (stream.reason ? ` (${stream.reason})` : '')];
  else if (stream.socket) [status, text] = ['connecting', 'not live: connecting…'];
  else [status, text] = ['idle', 'not live: nothing on this page is watched'];
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

// The claims of a JSON Web Token, read (not verified: the server does that) to say whom the
// page speaks for and until when. Nil when it is not one.
function tokenClaims(token) {
  try {
    const part = token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
    const claims = JSON.parse(decodeURIComponent(Array.from(atob(part), c => '%' + c.charCodeAt(0).toString(16).padStart(2, '0')).join('')));
    return claims !== null && typeof claims === 'object' && !Array.isArray(claims) ? claims : null;
  } catch (_) { return null; }
}

// A token's `exp` (seconds since 1970) as a Date, or null when it has none that a Date holds.
function expiryDate(exp) {
  if (typeof exp !== 'number') return null;
  const date = new Date(exp * 1000);
  return isNaN(date.getTime()) ? null : date;
}

function dateText(date) {
  return date.toDateString() === new Date().toDateString()
    ? date.toLocaleTimeString([], { timeZoneName: 'short' })
    : date.toLocaleString([], { timeZoneName: 'short' });
}

// Takes `token` as the one to send, once it decodes, names a user and has not expired by this
// computer's clock; else says why not. Nothing is sent to the server here.
function takeToken(token) {
  clearTimeout(state.expiryTimer);
  state.token = null; state.tokenProblem = null; state.tokenAccepted = false;
  sessionStorage.removeItem('tandem.token');
  token = (token || '').trim();
  if (!token) return;
  const claims = tokenClaims(token);
  if (!claims) {
    state.tokenProblem = { kind: 'malformed', message: 'Not a token: a bearer token is three base64url parts separated by dots, as `tandem token` prints (and `tandem console --as` puts in a link).' };
    return;
  }
  if (typeof claims.sub !== 'string' || claims.sub === '') {
    state.tokenProblem = { kind: 'malformed', message: 'Not a token for a user: it has no `sub` claim naming one.' };
    return;
  }
  const expiry = expiryDate(claims.exp);
  if (expiry && expiry.getTime() <= Date.now()) {
    state.tokenProblem = { kind: 'expired', who: claims.sub, exp: claims.exp };
    return;
  }
  state.token = token;
  sessionStorage.setItem('tandem.token', token);
  watchExpiry(token, expiry);
}

// At the token's expiry the page stops using it, as the server does (which also says so on
// the stream, by its own clock: whichever comes first).
function watchExpiry(token, expiry) {
  clearTimeout(state.expiryTimer);
  if (!expiry) return;
  // setTimeout waits at most 2^31 - 1 ms (about 24 days): a longer wait is taken in steps.
  const wait = Math.min(Math.max(0, expiry.getTime() - Date.now()), 2147483647);
  state.expiryTimer = setTimeout(() => {
    if (expiry.getTime() > Date.now()) { watchExpiry(token, expiry); return; }
    tokenRefused({ code: 'unauthenticated', reason: 'token-expired', message: `The token expired at ${dateText(expiry)}.` }, token);
  }, wait);
}

// The server refused `token` (at the stream's hello, on a request, or at its expiry), or it
// expired: the page stops using it and stops listening, says why, and asks for another. An
// answer about a token already replaced changes nothing.
function tokenRefused(error, token) {
  if (!token || token !== state.token) return;
  const claims = tokenClaims(token) || {};
  clearTimeout(state.expiryTimer);
  state.token = null; state.tokenAccepted = false;
  sessionStorage.removeItem('tandem.token');
  state.tokenProblem = { kind: error.reason === 'token-expired' ? 'expired' : 'refused', message: error.message, who: claims.sub, exp: claims.exp };
  stream.halt();
  renderAccess();
}

// The server took `token` (the stream welcomed it, or the API answered it).
function tokenAccepted(token) {
  if (token !== state.token || state.tokenAccepted) return;
  state.tokenAccepted = true;
  renderAccess();
}

// A new token (pasted, or from a link), or none: the page signs in again with it.
function setToken(token) {
  takeToken(token);
  renderAccess();
  stream.restart();
  route();
}

function problemText(problem) {
  if (problem.kind === 'malformed') return problem.message;
  if (problem.kind === 'refused') return `The token was refused: ${problem.message}`;
  const expiry = expiryDate(problem.exp);
  const who = problem.who ? `${problem.who}'s token` : 'The token';
  const link = problem.who ? ` (tandem console --as ${shellQuote(problem.who)} prints a link with one)` : '';
  return `${who} expired${expiry ? ' at ' + dateText(expiry) : ''}, so nothing here is live: paste a new one${link}.`;
}

function tokenForm(label, cancellable) {
  const input = el('input', { id: 'token-input', type: 'password', placeholder: 'a bearer token', autocomplete: 'off' });
  const form = el('form', { class: 'row', id: 'token-form', onsubmit: event => { event.preventDefault(); if (input.value.trim()) setToken(input.value); } },
    el('span', { id: 'access-mode', 'data-mode': 'token' }, label), input, el('button', { class: 'primary' }, 'Sign in'),
    cancellable ? el('button', { type: 'button', id: 'cancel-token', onclick: renderAccess }, 'Cancel') : null);
  return { form, input };
}

function renderAccess() {
  const access = document.getElementById('access');
  const mode = accessMode();
  if (mode === 'open') {
    access.replaceChildren(el('span', { id: 'access-mode', 'data-mode': 'open' }, 'Open server: no tokens, no rules — every caller reads and writes everything.'));
    return;
  }
  if (mode === 'rules') {
    access.replaceChildren(el('span', { id: 'access-mode', 'data-mode': 'rules' }, 'Rules without tokens: you browse as an anonymous caller.'));
    return;
  }
  if (state.token) {
    const claims = tokenClaims(state.token);
    const expiry = expiryDate(claims.exp);
    access.replaceChildren(...[
      state.tokenAccepted
        ? el('span', { id: 'access-mode', 'data-mode': 'token' }, 'Signed in as ', el('strong', { id: 'signed-in-as' }, claims.sub))
        : el('span', { id: 'access-mode', 'data-mode': 'token' }, 'Signing in as ', el('strong', { id: 'signing-in-as' }, claims.sub), '…'),
      claims.admin === true ? el('span', { class: 'pill' }, 'admin') : null,
      el('span', { id: 'token-expiry', class: 'quiet', 'data-exp': expiry ? String(claims.exp) : null, title: expiry ? expiry.toUTCString() : null },
        expiry ? `until ${dateText(expiry)}` : 'no expiry'),
      el('button', { id: 'new-token', type: 'button', onclick: () => {
        const { form, input } = tokenForm('Paste a new token:', true);
        access.replaceChildren(form);
        input.focus();
      } }, 'New token'),
      el('button', { id: 'sign-out', type: 'button', onclick: () => setToken(null) }, 'Sign out')].filter(node => node));
    return;
  }
  const problem = state.tokenProblem;
  const { form } = tokenForm(problem ? 'Paste a new token:' : 'This server needs a token:', false);
  access.replaceChildren(...[
    problem ? el('span', { id: 'token-problem', class: 'error', 'data-kind': problem.kind }, problemText(problem)) : null,
    form].filter(node => node));
  showLive();
}

// An operator's token ("admin": true). The server shows an operator every collection's name,
// though the rules still decide what it may read.
function isOperator() {
  if (accessMode() !== 'token' || !state.token) return false;
  const claims = tokenClaims(state.token);
  return claims !== null && claims.admin === true;
}

// Whether the caller may list `target` ({collection} or {group}) whole. The server lists only
// those to everyone but an operator; for an operator each name is asked about with a query of
// one document, so that a name the rules refuse it is not shown as a link to a refusal.
async function mayList(target) {
  if (!isOperator()) return true;
  try {
    await api('POST', '/v1/query', encode(Object.assign({}, target, { query: [{ limit: new Num('1') }] })));
    return true;
  } catch (error) {
    return !(error.code === 'permission-denied' || error.code === 'unauthenticated');
  }
}

// The items of a listing of collection (or group) names: a link to each the caller may list, the
// name alone (saying why) for each it may not.
async function nameItems(names, target, href, attribute) {
  const allowed = await Promise.all(names.map(name => mayList(target(name))));
  return names.map((name, i) => allowed[i]
    ? el('li', {}, el('a', { href: href(name), [attribute]: name }, name))
    : el('li', { class: 'unlisted', 'data-unlisted': name, title: 'An operator is shown every name, but the rules decide what it may read, and they do not let this token list this whole. Open one of its documents by its path.' },
      el('span', { class: 'mono' }, name), el('span', { class: 'quiet' }, ' — not listable with this token (the rules decide, for an operator too)')));
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
      list.replaceChildren(el('li', { class: 'quiet' }, accessMode() !== 'open'
        ? 'No collection you may list. Open a path you may read above.'
        : 'No collections yet. Write one: tandem set notes/hello \'{"text": "Hi"}\''));
    } else {
      list.replaceChildren(...await nameItems(answer.collections, id => ({ collection: id }), id => link('data', id), 'data-collection'));
    }
  } catch (error) { showError(list, error); }
}

async function groupsPage() {
  const list = el('ul', { class: 'list', id: 'groups' });
  main().replaceChildren(el('h1', {}, 'Collection groups'),
    el('p', { class: 'quiet' }, 'A group is every collection with the same id, wherever it is.'), list);
  try {
    const answer = await api('GET', '/v1/groups');
    list.replaceChildren(...(answer.groups.length
      ? await nameItems(answer.groups, group => ({ group }), group => '#/groups/' + encodeURIComponent(group), 'data-group')
      : [el('li', { class: 'quiet' }, 'No groups you may list.')]));
  } catch (error) { showError(list, error); }
}

// A new document's id when none is given: 20 letters and digits, as random as the browser makes
// them.
function randomID() {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
  let id = '';
  while (id.length < 20) {
    const bytes = new Uint8Array(32); crypto.getRandomValues(bytes);
    // 248 is 62 × 4: a byte past it would favour the first letters.
    for (const byte of bytes) if (byte < 248 && id.length < 20) id += alphabet[byte % 62];
  }
  return id;
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

// A form creating a document in the collection at `path`: with the id given (a random one when
// none is) and a JSON object for its data. The write's precondition is that no document is there,
// so it never overwrites one.
function createForm(path) {
  const id = el('input', { type: 'text', id: 'new-id', placeholder: 'id (empty: a random one)' });
  const body = el('textarea', { id: 'new-body', class: 'json', rows: 4, spellcheck: 'false' }, '{}');
  const outcome = el('div', { id: 'create-outcome' });
  const say = (kind, ...text) => outcome.replaceChildren(el('div', { class: kind, 'data-kind': kind }, ...text));
  return el('form', { id: 'create-form', onsubmit: async event => {
    event.preventDefault();
    const name = id.value.trim() || randomID();
    if (name.includes('/')) { say('error', `An id is one segment of a path, without a /: '${name}' is not one. Nothing was written.`); return; }
    let data;
    try { data = parseJSON(body.value); } catch (error) { say('error', `The data is not JSON (${error.message}). Nothing was written.`); return; }
    if (!isMap(data)) { say('error', 'A document\'s data is a JSON object: {"field": value, …}. Nothing was written.'); return; }
    const target = path + '/' + name;
    try {
      const answer = await api('PUT', documentURL(target) + '?exists=false', body.value);
      id.value = '';
      say('notice', 'Created ', el('a', { href: link('data', target), 'data-created': target }, target),
        answer && answer.version ? ` (version ${answer.version.source}).` : '.');
    } catch (error) {
      say('error', error.code === 'failed-precondition' || error.code === 'already-exists'
        ? `Not created: there is a document at ${target} already, and it was left as it is (${error.message}).`
        : `${error.code}: ${error.message}`);
    }
  } }, el('h2', {}, 'New document'),
  el('div', { class: 'row' }, id, el('button', { class: 'primary', id: 'create-document' }, 'Create')),
  body, outcome);
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
    el('div', { class: 'row' }, more, count),
    ...(group ? [] : [createForm(path)]));

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
  const tools = el('div', { class: 'row', id: 'document-tools' });
  const fields = el('tbody', { id: 'fields' });
  const fieldTable = el('table', { id: 'field-table' },
    el('thead', {}, el('tr', {}, el('th', {}, 'Field'), el('th', {}, 'Type'), el('th', {}, 'Value'), el('th', {}))), fields);
  const editor = el('div', { id: 'json-panel', hidden: true });
  const subcollections = el('ul', { class: 'list', id: 'subcollections' });
  const actions = el('div', { id: 'document-actions' });
  main().replaceChildren(crumbs(path), el('h1', {}, segments(path).pop()), meta, notice, tools, fieldTable, editor,
    actions, el('h2', {}, 'Collections under this document'), subcollections);

  let current = null;
  let loaded = false;
  // While a field or the whole document is edited the page keeps the version it showed: a change
  // that arrives meanwhile is announced and kept in `latest`, and saving is refused by the
  // version precondition.
  let editing = false;
  let latest;
  // The JSON editor, while it is open: its text area and where its problems show.
  let json = null;

  function say(kind, text) { notice.replaceChildren(el('div', { class: kind, 'data-kind': kind }, text)); }

  async function write(method, query, body, done) {
    try {
      const answer = await api(method, documentURL(path) + query, body);
      editing = false; latest = undefined;
      closeJSON();
      if (answer && answer.data) show(answer, new Set());
      say('notice', done + (answer && answer.version ? ` (version ${answer.version.source}).` : '.'));
    } catch (error) {
      if (error.code === 'failed-precondition' || error.code === 'not-found') {
        if (json) {
          // What was typed is kept: it may be long, and the page never throws it away unasked.
          say('error', `Not saved: the document changed since this page showed it (${error.message}). Nothing was overwritten. What you typed is still below: copy what you need, then Cancel to see the document as it is now.`);
          return;
        }
        editing = false;
        if (latest !== undefined) { show(latest, new Set()); latest = undefined; }
        say('error', `Not saved: the document changed since this page showed it (${error.message}). Nothing was overwritten; the page shows it as it is now.`);
      } else {
        say('error', `${error.code}: ${error.message}`);
      }
    }
  }

  // Every write of a field is an update of it with the version the page shows as precondition.
  function update(keys, rawValue, done) {
    write('PATCH', `?version=${current.version.source}`, '{' + JSON.stringify(fieldPath(keys)) + ':' + rawValue + '}', done);
  }

  // An array's items are written as the whole array, one item changed (a field path names no
  // item), under the same precondition.
  function setItems(keys, items, done) { update(keys, encode(items), done); }

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
          el('button', { class: 'link edit', onclick: () => edit(valueCell, encode(value), raw => update(keys, raw, `Saved ${name}`)) }, 'edit'),
          Array.isArray(value) ? el('button', { class: 'link add-item', onclick: () =>
            edit(valueCell, '', raw => setItems(keys, value.concat([parseJSON(raw)]), `Added an item to ${name}`)) }, 'add item') : null,
          el('button', { class: 'link danger remove', onclick: () => update(keys, '{"$delete":true}', `Deleted ${name}`) }, 'delete'),
        ] : []));
      rows.push(row);
      if (isMap(value)) rows.push(...fieldRows(value, keys, depth + 1, changed, editable));
      else if (Array.isArray(value)) {
        value.forEach((item, index) => {
          const itemCell = el('td', { class: 'value' }, encode(item));
          rows.push(el('tr', { 'data-array': name, 'data-item': String(index), class: changed.has(keys[0]) ? 'changed' : null },
            el('td', { style: { paddingLeft: `${8 + (depth + 1) * 18}px` }, class: 'quiet' }, String(index)),
            el('td', { class: 'type' }, typeName(item)), itemCell,
            el('td', { class: 'actions' }, editable ? [
              el('button', { class: 'link edit', onclick: () => edit(itemCell, encode(item), raw => {
                const items = value.slice(); items[index] = parseJSON(raw);
                setItems(keys, items, `Saved item ${index} of ${name}`);
              }) }, 'edit'),
              el('button', { class: 'link danger remove', onclick: () =>
                setItems(keys, value.filter((_, i) => i !== index), `Deleted item ${index} of ${name}`) }, 'delete'),
            ] : [])));
        });
      }
    }
    return rows;
  }

  // Edits a value in its cell as JSON; `save` gets the text once it parses.
  function edit(cell, text, save) {
    editing = true;
    const input = el('input', { type: 'text', class: 'wide edit-value', value: text });
    cell.replaceChildren(el('form', { class: 'row', onsubmit: event => {
      event.preventDefault();
      try { parseJSON(input.value); } catch (_) { say('error', 'The value must be JSON: "text" in quotes, 12, 1.5, true, null, [..] or {..}.'); return; }
      save(input.value);
    } }, input, el('button', { class: 'primary save' }, 'Save'), el('button', { type: 'button', class: 'cancel', onclick: cancel }, 'Cancel')));
    input.focus();
  }

  // Leaves an editor without saving: the page shows the document as it is now.
  function cancel() {
    editing = false;
    closeJSON();
    const shown = latest !== undefined ? latest : current;
    latest = undefined; notice.replaceChildren();
    show(shown, new Set());
  }

  // The whole document's data as JSON in a text area; saving sets it with the version shown as
  // the precondition, as every field edit does.
  function openJSON() {
    if (!current) return;
    editing = true;
    const text = el('textarea', { id: 'json-editor', class: 'json', spellcheck: 'false' });
    text.value = pretty(current.data);
    text.rows = Math.min(30, Math.max(6, text.value.split('\n').length + 1));
    const problem = el('div', { id: 'json-problem' });
    json = { text, problem };
    fieldTable.hidden = true; actions.hidden = true; tools.hidden = true;
    editor.hidden = false;
    editor.replaceChildren(
      el('p', { class: 'quiet', id: 'json-version', 'data-version': current.version.source },
        `The document's data at version ${current.version.source}. Saving replaces it, only if the document is still at that version.`),
      text, problem,
      el('div', { class: 'row' },
        el('button', { class: 'primary', id: 'save-json', type: 'button', onclick: saveJSON }, 'Save'),
        el('button', { id: 'cancel-json', type: 'button', onclick: cancel }, 'Cancel')));
    text.focus();
  }

  function saveJSON() {
    let data;
    try { data = parseJSON(json.text.value); } catch (error) {
      json.problem.replaceChildren(el('div', { class: 'error', 'data-kind': 'parse' }, `Not saved: this is not JSON (${error.message}).`));
      return;
    }
    if (!isMap(data)) {
      json.problem.replaceChildren(el('div', { class: 'error', 'data-kind': 'parse' }, 'Not saved: a document\'s data is a JSON object, {"field": value, …}.'));
      return;
    }
    json.problem.replaceChildren();
    write('PUT', `?version=${current.version.source}`, json.text.value, 'Saved the document');
  }

  function closeJSON() {
    if (!json) return;
    json = null;
    editor.hidden = true; editor.replaceChildren();
    fieldTable.hidden = false; actions.hidden = false; tools.hidden = false;
  }

  function show(document, changed) {
    current = document;
    main().dataset.version = document ? document.version.source : '0';
    tools.replaceChildren(...(document ? [el('button', { id: 'edit-json', type: 'button', onclick: openJSON }, 'Edit JSON')] : []));
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
        ? await nameItems(answer.collections, id => ({ collection: path + '/' + id }), id => link('data', path + '/' + id), 'data-collection')
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
  state.shown = '#' + hash;
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
  showLive();
}

// A link from `tandem console --as` carries a token in the fragment, which browsers never send
// to the server. It is taken out of the address bar (which shows the page shown before it) and
// returned; null when the fragment holds none.
function fragmentToken() {
  if (!location.hash.startsWith('#token=')) return null;
  const text = location.hash.slice('#token='.length);
  let token;
  try { token = decodeURIComponent(text); } catch (_) { token = text; }
  history.replaceState(null, '', location.pathname + location.search + state.shown);
  return token;
}

// Every change of the fragment: a page to show, or a token (a link opened in a tab already on
// the console), which the console signs in with at once, as on its first load.
function fragmentChanged() {
  const token = fragmentToken();
  if (token !== null && accessMode() === 'token') setToken(token);
  else route();
}

async function start() {
  const token = fragmentToken();
  try {
    state.health = await api('GET', '/health');
    document.getElementById('server-version').textContent = `Tandem ${state.health.version}`;
  } catch (error) {
    showError(main(), error);
    return;
  }
  // Only a server that verifies tokens is sent one.
  if (accessMode() === 'token') takeToken(token !== null ? token : sessionStorage.getItem('tandem.token'));
  renderAccess();
  window.addEventListener('hashchange', fragmentChanged);
  route();
}

start();
})();
