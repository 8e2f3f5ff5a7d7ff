/* Answers on the answering admin pages (a trace, a conversation), rendered as markdown.
 *
 * The same libraries and sanitizer settings as the chat page (static/chat/chat.js: marked, then
 * DOMPurify), stricter still: staff read answers here to audit them, so nothing in one is
 * followed. Raw HTML shows as text; a citation `[来源 N](citation://N)` becomes a "来源 N" badge
 * when N is one of the answer's citations and "[来源 N]" text otherwise; any other link shows as
 * its text and its full address; an image shows only when it is `asset://ID` of one of the
 * answer's citations. Each answer comes as a JSON data block (`data-answer-source` names it);
 * until this script runs, or without it, the page shows the answer as text.
 */
(function () {
  "use strict";

  if (!window.marked || !window.DOMPurify || !window.ragsiteAnswerMarkdown) return;

  var answerMarkdown = window.ragsiteAnswerMarkdown;  // answer_markdown.js
  var escapeHtml = answerMarkdown.escapeHtml;

  // What the answer being rendered may show: its citation numbers and image ids.
  var context = { numbers: new Set(), assets: new Set(), assetUrl: "" };

  var markdown = new window.marked.Marked({ gfm: true, breaks: true, async: false });
  markdown.use({
    renderer: {
      html: answerMarkdown.rawHtml,
      link: function (token) {
        var inner = this.parser.parseInline(token.tokens);
        var href = String(token.href || "");
        var cite = /^citation:\/\/(\d+)$/.exec(href);
        if (cite) {
          if (!context.numbers.has(parseInt(cite[1], 10))) return "[" + inner + "]";
          return '<span class="chat-cite" title="' + escapeHtml(href) + '">' + inner + "</span>";
        }
        return answerMarkdown.shownAddress(token, inner);
      },
      image: function (token) {
        return answerMarkdown.assetImage(token, context.assets, context.assetUrl, "chat-answer-image");
      },
    },
  });

  window.DOMPurify.addHook("afterSanitizeAttributes", function (element) {
    if (element.tagName !== "IMG") return;
    var src = element.getAttribute("src") || "";
    var id = src.indexOf(context.assetUrl) === 0 ? src.slice(context.assetUrl.length) : "";
    if (!/^\d+$/.test(id) || !context.assets.has(parseInt(id, 10))) element.remove();
  });

  var PURIFY = {
    ALLOWED_TAGS: answerMarkdown.TAGS.concat(["img", "span"]),
    ALLOWED_ATTR: ["src", "alt", "title", "class", "align", "start"],
    ALLOW_DATA_ATTR: false,
    ALLOWED_URI_REGEXP: answerMarkdown.URI,
  };

  function render(target) {
    var block = document.getElementById(target.getAttribute("data-answer-source") || "");
    if (!block) return;
    var source = JSON.parse(block.textContent);
    context = {
      numbers: new Set(source.citations || []),
      assets: new Set(source.assets || []),
      assetUrl: String(source.asset_url || ""),
    };
    target.innerHTML = window.DOMPurify.sanitize(markdown.parse(String(source.text || "")), PURIFY);
    target.classList.remove("chat-text");
    target.classList.add("chat-markdown");
  }

  function renderAll() {
    document.querySelectorAll("[data-answer-source]").forEach(render);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", renderAll);
  } else {
    renderAll();
  }
})();
