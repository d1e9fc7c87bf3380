// Lists the notes and adds one, through the web server's /api/ proxy.
const list = document.getElementById("notes");
const status = document.getElementById("status");

async function load() {
  const answer = await fetch("/api/notes");
  if (!answer.ok) {
    status.textContent = "Could not load the notes (" + answer.status + ").";
    return;
  }
  const { notes } = await answer.json();
  list.replaceChildren(...notes.map((note) => {
    const item = document.createElement("li");
    item.textContent = note.text;
    return item;
  }));
  status.textContent = notes.length ? "" : "No notes yet.";
}

document.getElementById("add").addEventListener("submit", async (event) => {
  event.preventDefault();
  const input = document.getElementById("text");
  const answer = await fetch("/api/notes", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ text: input.value }),
  });
  if (!answer.ok) {
    status.textContent = (await answer.json()).error || "Could not add the note.";
    return;
  }
  input.value = "";
  await load();
});

load();
