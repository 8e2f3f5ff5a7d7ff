/* What the chat page (chat.js) and the answering admin pages (admin_answer.js) render answers
 * with in common: HTML escaping; raw HTML in an answer shown as text, never interpreted; a link
 * that is not followed shown as its text and its full address; and the sanitizer's base (the
 * Markdown tags an answer may use, http(s) and mailto the only schemes). Each page adds what it
 * may show on top (the chat page: links it follows, citation buttons).
 */
(function () {
  "use strict";

  function escapeHtml(text) {
    return String(text)
      .replace(/&/g, "&amp;")
      .replace(/</g, "&lt;")
      .replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;")
      .replace(/'/g, "&#39;");
  }

  // marked's `html` token, as text.
  function rawHtml(token) {
    return token.block ? '<p class="raw">' + escapeHtml(token.text) + "</p>" : escapeHtml(token.text);
  }

  // A link shown, not followed: the address in full, as text. An address GFM autolinked out of
  // running text (or an autolink `<…>`) is its own label: shown once.
  function shownAddress(token, inner) {
    var href = String(token.href || "");
    var text = String(token.text || "");
    if (href === text || href === "mailto:" + text || href === "http://" + text) {
      return '<code class="address">' + escapeHtml(text) + "</code>";
    }
    return inner + ' (<code class="address">' + escapeHtml(href) + "</code>)";
  }

  // An image only when it is `asset://ID` of an image the answer's citations carry.
  function assetImage(token, assets, baseUrl, className) {
    var match = /^asset:\/\/(\d+)$/.exec(String(token.href || "").trim());
    if (!match || !assets.has(parseInt(match[1], 10))) return "";
    return (
      '<img class="' + className + '" src="' + escapeHtml(baseUrl + match[1]) + '" alt="' +
      escapeHtml(token.text || "") + '">'
    );
  }

  window.ragsiteAnswerMarkdown = {
    escapeHtml: escapeHtml,
    rawHtml: rawHtml,
    shownAddress: shownAddress,
    assetImage: assetImage,
    TAGS: [
      "p", "br", "strong", "em", "del", "s", "code", "pre", "blockquote", "ul", "ol", "li",
      "table", "thead", "tbody", "tr", "th", "td", "h1", "h2", "h3", "h4", "h5", "h6", "hr",
    ],
    // DOMPurify's default minus every scheme but http(s) and mailto (it also checks plain
    // attribute values with it: scheme-less values must keep passing).
    URI: /^(?:(?:https?|mailto):|[^a-z]|[a-z+.\-]+(?:[^a-z+.\-:]|$))/i,
  };
})();
