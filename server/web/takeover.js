// The takeover page: a full-window xterm.js terminal bridged to a shell in
// the box over this link's WebSocket (<page URL>/ws). The link is spent by
// the WebSocket, which opens only when the person presses "Open terminal"
// (link scanners that run scripts spend nothing); a page reload cannot
// reopen it. psbx closes it after a while without input, or at the end of
// its lifetime: the status line then says why.
"use strict";
(function () {
  const status = document.getElementById("status");
  const element = document.getElementById("terminal");
  const say = (text, kind) => {
    status.textContent = text;
    status.dataset.state = kind;
  };
  const term = new Terminal({ cursorBlink: true, scrollback: 5000, convertEol: false });
  const fit = new FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open(element);
  fit.fit();
  // For the browser tests (and the curious): the terminal's size.
  window.psbxTerminal = term;

  const path = window.location.pathname.replace(/\/+$/, "");
  const scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
  const decoder = new TextDecoder("utf-8");
  let socket = null;
  let ended = false;
  const send = (message) => {
    if (socket && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify(message));
  };
  term.onData((data) => send({ type: "input", data }));
  term.onResize(({ cols, rows }) => send({ type: "resize", cols, rows }));
  window.addEventListener("resize", () => fit.fit());

  document.getElementById("open").addEventListener("click", () => {
    if (socket) return;
    say("connecting…", "connecting");
    const url = `${scheme}//${window.location.host}${path}/ws?cols=${term.cols}&rows=${term.rows}`;
    socket = new WebSocket(url);
    socket.binaryType = "arraybuffer";
    connect(socket);
  });

  function connect(socket) {
    socket.addEventListener("open", () => {
      say("connected", "connected");
      send({ type: "resize", cols: term.cols, rows: term.rows });
      term.focus();
    });
    socket.addEventListener("message", (event) => {
      if (typeof event.data === "string") {
        term.write(event.data);
      } else {
        term.write(decoder.decode(new Uint8Array(event.data), { stream: true }));
      }
    });
    socket.addEventListener("close", (event) => {
      if (event.code === 1000) {
        ended = true;
        say("the shell ended", "ended");
      } else if (event.code === 1008 && event.reason) {
        ended = true;
        say(event.reason, "closed");
      } else if (!ended) {
        say("connection lost: ask for a new takeover link", "lost");
      }
    });
  }
})();
