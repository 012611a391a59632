// tree.js — the tree of choices made from a root prompt: paths of steps that share a prefix up
// to their branch point, where the prompt sits in it, and its view (jump back, take another
// branch). Uses state.js and show.js; the jump itself is prompt.js's treeJump.
'use strict';

// Where state.tokens sits in the tree; a prompt outside it becomes a new root.
function treeSync() {
  const tr = state.tree, tk = state.tokens || [];
  if (tr.root && tr.root.tokens.length <= tk.length && tr.root.tokens.every((x, i) => x === tk[i])) {
    const rest = tk.slice(tr.root.tokens.length);
    if (!rest.length) { tr.at = [tr.at[0], 0]; return; }
    for (let p = 0; p < tr.paths.length; p++) {
      const path = tr.paths[p];
      if (rest.length <= path.length && rest.every((x, i) => path[i].id === x)) { tr.at = [p, rest.length]; return; }
    }
  }
  state.tree = { root: { text: state.text, tokens: tk.slice() }, paths: [], at: [0, 0] };
}

// A choice made at the current point: walk on, extend the path, or branch off.
function treeChoose(c) {
  const tr = state.tree;
  if (!tr.root) return;
  const [p, k] = tr.at;
  const path = tr.paths[p];
  if (!path) { tr.paths.push([c]); tr.at = [tr.paths.length - 1, 1]; return; }
  if (path[k] && path[k].id === c.id) { tr.at = [p, k + 1]; return; }
  if (k === path.length) { path.push(c); tr.at = [p, k + 1]; return; }
  for (let q = 0; q < tr.paths.length; q++) {  // an earlier branch already took it
    const o = tr.paths[q];
    if (o.length > k && o[k].id === c.id && path.slice(0, k).every((x, i) => o[i].id === x.id)) { tr.at = [q, k + 1]; return; }
  }
  tr.paths.push(path.slice(0, k).concat(c));
  tr.at = [tr.paths.length - 1, k + 1];
}

// The first step where path p leaves the earlier paths (its branch point).
function branchAt(p) {
  const paths = state.tree.paths;
  let best = 0;
  for (let q = 0; q < p; q++) {
    let k = 0;
    while (k < paths[p].length && k < paths[q].length && paths[p][k].id === paths[q][k].id) k++;
    best = Math.max(best, k);
  }
  return best;
}

function renderTree() {
  const ol = $('tree'), tr = state.tree;
  const focused = ol.contains(document.activeElement) ? document.activeElement.dataset.key : '';
  ol.replaceChildren();
  if (!tr.root || !tr.paths.length) {
    ol.appendChild(Object.assign(document.createElement('li'), { className: 'muted', textContent: 'No choices yet: click a candidate.' }));
    return;
  }
  tr.paths.forEach((path, p) => {
    const li = document.createElement('li');
    li.className = 'branch' + (p === tr.at[0] ? ' current' : '');
    const from = branchAt(p);
    const label = p === 0 ? 'Path 1' : `Branch ${p + 1}, from step ${from}`;
    li.setAttribute('aria-label', label);
    const head = Object.assign(document.createElement('button'), { type: 'button', className: 'step root',
      textContent: from ? `↳ ${from}` : p ? '↳ start' : '●' });  // a branch from the start is not Path 1
    head.dataset.key = `${p}.${from}`;
    head.dataset.p = p; head.dataset.k = from;
    head.setAttribute('aria-label', from ? `${label}: back to step ${from}` : 'Back to the typed prompt');
    if (p === tr.at[0] && tr.at[1] === from) head.setAttribute('aria-current', 'step');
    li.appendChild(head);
    for (let k = from; k < path.length; k++) {
      const b = document.createElement('button');
      b.type = 'button';
      b.className = 'step';
      b.dataset.p = p; b.dataset.k = k + 1; b.dataset.key = `${p}.${k + 1}`;
      b.appendChild(pieceNode(path[k]));
      b.setAttribute('aria-label', `${label}, step ${k + 1}: ${shown(path[k].text)}`);
      if (p === tr.at[0] && tr.at[1] === k + 1) b.setAttribute('aria-current', 'step');
      if (p === tr.at[0] && k + 1 > tr.at[1]) b.classList.add('ahead');
      li.appendChild(b);
    }
    ol.appendChild(li);
  });
  if (focused) { const b = ol.querySelector(`[data-key="${focused}"]`); if (b) b.focus(); }
}
