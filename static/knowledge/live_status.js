// Live ingestion status on the admin document list: one EventSource per watched knowledge base.
// The server is the truth; an event only updates cells that are already on the page, and a
// document that is not on the page yet triggers a reload once it reaches a final state.
(function () {
  "use strict";
  const root = document.getElementById("rag-live");
  if (!root || !window.EventSource) return;
  const state = document.getElementById("rag-live-state");
  // As the server renders them (knowledge/admin/common.py STATUS_COLOURS).
  const colours = { ready: "#0e7490", failed: "#b91c1c", queued: "#6b7280", parsing: "#1d4ed8", indexing: "#1d4ed8" };
  const ids = (root.dataset.kbIds || "").split(",").filter(Boolean);
  let open = 0;

  function onDocument(event) {
    update(JSON.parse(event.data));
  }

  // A batch of documents reaching the same stage arrives as one event.
  function onDocuments(event) {
    (JSON.parse(event.data).documents || []).forEach(update);
  }

  function update(data) {
    const cell = document.querySelector('[data-doc-status="' + data.document + '"]');
    if (!cell) {
      if (data.status === "ready" || data.status === "failed") window.location.reload();
      return;
    }
    cell.textContent = data.status_label || data.status;
    cell.style.color = colours[data.status] || "#111827";
    const error = document.querySelector('[data-doc-error="' + data.document + '"]');
    if (error) {
      // The message in words; its code (for operations) and the whole message as the tooltip.
      error.textContent = data.error_code ? (data.error_message || "").slice(0, 60) || data.error_code : "";
      error.title = data.error_code ? data.error_code + " · " + (data.error_message || "") : "";
    }
    const row = cell.closest("tr");
    const attempts = row && row.querySelector(".field-attempts");
    if (attempts && data.attempts !== undefined) attempts.textContent = data.attempts;
    const chunks = document.querySelector('[data-doc-chunks="' + data.document + '"]');
    if (chunks && data.progress_label) chunks.textContent = data.progress_label;
    else if (chunks && data.status === "ready") chunks.textContent = data.chunk_count;
  }

  ids.forEach(function (id) {
    const source = new EventSource(root.dataset.eventsPrefix + id + "/");
    source.addEventListener("stream-open", function () {
      open += 1;
      state.textContent = state.dataset.connected || "实时状态：已连接";
    });
    source.addEventListener("document", onDocument);
    source.addEventListener("documents", onDocuments);
    source.addEventListener("version", function () { /* version badges live on the versions page */ });
    source.onerror = function () { state.textContent = "实时状态：连接中断，正在重连…"; };
  });
})();
