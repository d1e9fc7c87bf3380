// psbx's web app (/app): the little the pages need a script for. Every page
// works as plain HTML forms except the review feedback (drawing on a
// screenshot, dictation, sending items with their images).
//
// * forms with class "confirm" ask first (Shut down, Delete);
// * on a review page: the box's page in the frame follows the chosen URL;
//   "Draw on it" opens a screenshot under a <canvas> (pointer events, so a
//   finger works too; red strokes; Undo, Clear); "Add" makes an item of the
//   text and the drawing (composed at the image's natural size, PNG); "Send"
//   and "Looks good" post the answer as JSON with the page's CSRF token;
// * "Dictate" uses the browser's own speech recognition where there is one
//   (the button stays hidden elsewhere): words appear in the text box as they
//   are spoken; no audio or transcript goes anywhere but that text box;
// * the draft (text and items) is kept in sessionStorage until it is sent,
//   so a reload loses nothing.
'use strict';

(function () {
  const $ = (sel, root) => (root || document).querySelector(sel);
  const $$ = (sel, root) => Array.from((root || document).querySelectorAll(sel));

  for (const form of $$('form.confirm')) {
    form.addEventListener('submit', (e) => {
      if (!window.confirm(form.dataset.confirm || 'Are you sure?')) e.preventDefault();
    });
  }

  const review = $('#review');
  if (!review) return;
  const reviewId = review.dataset.review;
  const csrf = ($('meta[name="csrf-token"]') || {}).content || '';

  // The page shown in the frame, and the URL a screenshot is taken of.
  const frame = $('#frame');
  const urlSelect = $('#shot-url');
  for (const button of $$('button.show-url')) {
    button.addEventListener('click', () => {
      if (frame) frame.src = button.dataset.url;
      if (urlSelect) urlSelect.value = button.dataset.url;
      for (const b of $$('button.show-url')) b.setAttribute('aria-pressed', String(b === button));
    });
  }
  if (urlSelect && frame) {
    urlSelect.addEventListener('change', () => { frame.src = urlSelect.value; });
  }

  const feedback = $('#feedback');
  if (!feedback) return;
  const text = $('#item-text');
  const itemsList = $('#items');
  const status = $('#send-status');
  const draftKey = `psbx-draft-${reviewId}`;
  let items = [];

  function saveDraft() {
    const draft = { text: text.value, items };
    try {
      sessionStorage.setItem(draftKey, JSON.stringify(draft));
    } catch (_) {
      // Over the storage quota with images: keep the words at least.
      try {
        sessionStorage.setItem(draftKey, JSON.stringify({
          text: text.value, items: items.map((i) => ({ text: i.text })),
        }));
      } catch (_) { /* nothing more to do */ }
    }
  }

  function renderItems() {
    itemsList.textContent = '';
    items.forEach((item, n) => {
      const li = document.createElement('li');
      li.className = 'item';
      const p = document.createElement('p');
      p.textContent = item.text || '(no text)';
      li.appendChild(p);
      if (item.image) {
        const img = document.createElement('img');
        img.src = item.image;
        img.alt = `Your drawing for item ${n + 1}`;
        li.appendChild(img);
      }
      const remove = document.createElement('button');
      remove.type = 'button';
      remove.textContent = 'Remove';
      remove.addEventListener('click', () => { items.splice(n, 1); renderItems(); saveDraft(); });
      li.appendChild(remove);
      itemsList.appendChild(li);
    });
    $('#items-heading').hidden = items.length === 0;
  }

  try {
    const kept = JSON.parse(sessionStorage.getItem(draftKey) || 'null');
    if (kept) {
      text.value = kept.text || '';
      items = Array.isArray(kept.items) ? kept.items : [];
    }
  } catch (_) { /* a broken draft is dropped */ }
  renderItems();
  text.addEventListener('input', saveDraft);

  // Drawing on a screenshot.
  const editor = $('#editor');
  const stage = $('#editor-image');
  const canvas = $('#editor-canvas');
  const ctx = canvas.getContext('2d');
  let strokes = [];
  let current = null;

  function lineWidth() { return Math.max(3, Math.round(canvas.width / 240)); }

  function redraw() {
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    ctx.strokeStyle = '#e11d2e';
    ctx.lineWidth = lineWidth();
    ctx.lineCap = 'round';
    ctx.lineJoin = 'round';
    for (const stroke of strokes.concat(current ? [current] : [])) {
      ctx.beginPath();
      stroke.forEach(([x, y], i) => (i ? ctx.lineTo(x, y) : ctx.moveTo(x, y)));
      if (stroke.length === 1) ctx.lineTo(stroke[0][0] + 0.1, stroke[0][1]);
      ctx.stroke();
    }
  }

  // A pointer's place in image pixels.
  function at(e) {
    const box = canvas.getBoundingClientRect();
    return [
      ((e.clientX - box.left) * canvas.width) / box.width,
      ((e.clientY - box.top) * canvas.height) / box.height,
    ];
  }

  canvas.addEventListener('pointerdown', (e) => {
    e.preventDefault();
    canvas.setPointerCapture(e.pointerId);
    current = [at(e)];
    redraw();
  });
  canvas.addEventListener('pointermove', (e) => {
    if (!current) return;
    current.push(at(e));
    redraw();
  });
  const finish = () => {
    if (current) strokes.push(current);
    current = null;
    redraw();
  };
  canvas.addEventListener('pointerup', finish);
  canvas.addEventListener('pointercancel', finish);

  function openEditor(src, label) {
    strokes = [];
    current = null;
    editor.hidden = false;
    $('#editor-label').textContent = label;
    stage.onload = null;
    stage.addEventListener('load', function ready() {
      stage.removeEventListener('load', ready);
      canvas.width = stage.naturalWidth;
      canvas.height = stage.naturalHeight;
      editor.dataset.ready = 'true';
      redraw();
    });
    editor.dataset.ready = 'false';
    stage.src = src;
    editor.scrollIntoView({ block: 'start' });
  }

  function closeEditor() {
    editor.hidden = true;
    editor.dataset.ready = 'false';
    stage.removeAttribute('src');
    strokes = [];
  }

  for (const button of $$('button.annotate')) {
    button.addEventListener('click', () => openEditor(button.dataset.src, button.dataset.label));
  }
  $('#undo').addEventListener('click', () => { strokes.pop(); redraw(); });
  $('#clear').addEventListener('click', () => { strokes = []; redraw(); });
  $('#close-editor').addEventListener('click', closeEditor);

  // The screenshot and the drawing as one PNG at the image's natural size.
  function composed() {
    return new Promise((resolve) => {
      const out = document.createElement('canvas');
      out.width = stage.naturalWidth;
      out.height = stage.naturalHeight;
      const g = out.getContext('2d');
      g.drawImage(stage, 0, 0);
      g.drawImage(canvas, 0, 0);
      out.toBlob((blob) => {
        const reader = new FileReader();
        reader.onload = () => resolve(reader.result);
        reader.readAsDataURL(blob);
      }, 'image/png');
    });
  }

  async function addItem() {
    const words = text.value.trim();
    const drawing = !editor.hidden && editor.dataset.ready === 'true';
    if (!words && !drawing) {
      status.textContent = 'Write what is wrong, or draw on a screenshot, then add it.';
      return;
    }
    const item = { text: words };
    if (drawing) item.image = await composed();
    items.push(item);
    text.value = '';
    closeEditor();
    renderItems();
    saveDraft();
    status.textContent = `Added item ${items.length}. Add more, or send.`;
  }
  $('#add-item').addEventListener('click', addItem);

  async function send(approved) {
    const buttons = $$('#send, #approve, #add-item');
    buttons.forEach((b) => { b.disabled = true; });
    status.textContent = 'Sending…';
    const body = {
      approved,
      items: items.map((i) => ({
        text: i.text || '',
        imagePng: i.image ? i.image.replace(/^data:image\/png;base64,/, '') : null,
      })),
    };
    try {
      const response = await fetch(`/app/reviews/${encodeURIComponent(reviewId)}/answer`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', 'X-CSRF-Token': csrf },
        body: JSON.stringify(body),
        credentials: 'same-origin',
      });
      if (!response.ok) {
        let message = `psbx answered ${response.status}`;
        try {
          const answer = await response.json();
          if (answer && answer.error && answer.error.message) message = answer.error.message;
        } catch (_) { /* not JSON */ }
        throw new Error(message);
      }
      // Signed out meanwhile, the answer is the sign-in page, not JSON.
      const answer = await response.json().catch(() => null);
      if (!answer || !answer.state) {
        throw new Error('you are not signed in any more: sign in again in another tab');
      }
      sessionStorage.removeItem(draftKey);
      status.textContent = approved ? 'Sent: looks good.' : 'Sent to the agent.';
      window.location.reload();
    } catch (err) {
      status.textContent = `Not sent: ${err.message}. Your draft is kept; try again.`;
      buttons.forEach((b) => { b.disabled = false; });
    }
  }

  $('#send').addEventListener('click', async () => {
    // Words typed but not added yet go with the answer too.
    if (text.value.trim() || (!editor.hidden && editor.dataset.ready === 'true')) {
      await addItem();
    }
    if (!items.length) {
      status.textContent = 'Add at least one item, or press "Looks good".';
      return;
    }
    send(false);
  });
  $('#approve').addEventListener('click', () => send(true));

  // Dictation, where the browser has speech recognition.
  const Recognition = window.SpeechRecognition || window.webkitSpeechRecognition;
  const dictate = $('#dictate');
  if (Recognition && dictate) {
    dictate.hidden = false;
    let listening = null;
    dictate.addEventListener('click', () => {
      if (listening) { listening.stop(); return; }
      const rec = new Recognition();
      rec.continuous = true;
      rec.interimResults = true;
      rec.lang = document.documentElement.lang || 'en';
      const before = text.value ? `${text.value.replace(/\s+$/, '')} ` : '';
      let spoken = '';
      rec.onresult = (e) => {
        let interim = '';
        for (let i = e.resultIndex; i < e.results.length; i++) {
          if (e.results[i].isFinal) spoken += e.results[i][0].transcript;
          else interim += e.results[i][0].transcript;
        }
        text.value = before + spoken + interim;
        saveDraft();
      };
      rec.onend = () => {
        listening = null;
        dictate.setAttribute('aria-pressed', 'false');
        dictate.textContent = 'Dictate';
      };
      rec.onerror = (e) => { status.textContent = `Dictation stopped: ${e.error}.`; };
      listening = rec;
      dictate.setAttribute('aria-pressed', 'true');
      dictate.textContent = 'Stop dictating';
      rec.start();
    });
  }
})();
