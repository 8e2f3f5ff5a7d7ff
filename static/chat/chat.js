/* The chat page: knowledge base picker, conversations, streamed answers with their sources.
 *
 * Plain script, no build step. Answers are markdown written by a model that quotes documents
 * written by others, so nothing in them is trusted: raw HTML is shown as text, links only ever
 * become citation buttons (numbers this message really has) or links to the hosts the knowledge
 * base allows (its `link_hosts`, matched as knowledge/links.py does); any other link, including
 * an address GFM would autolink, is shown as text with its whole address. Images are only
 * `asset://ID` ones whose ID belongs to this message's citations. DOMPurify then checks the
 * result again, and the page's Content-Security-Policy allows nothing but this origin.
 */
(function () {
  "use strict";

  var config = JSON.parse(document.getElementById("chat-config").textContent);
  var catalog = JSON.parse(document.getElementById("chat-i18n").textContent);
  var STORAGE_KEY = "ragsite.chat.kb";

  function t(key) {
    return Object.prototype.hasOwnProperty.call(catalog, key) ? catalog[key] : key;
  }

  function $(id) {
    return document.getElementById(id);
  }

  var el = {
    kbSelect: $("kb-select"),
    alsoBox: $("kb-also"),
    alsoCount: $("kb-also-count"),
    list: $("conversation-list"),
    newConversation: $("new-conversation"),
    messages: $("messages"),
    status: $("status"),
    composer: $("composer"),
    question: $("question"),
    send: $("send"),
    stop: $("stop"),
    panel: $("source-panel"),
    panelTitle: $("source-title"),
    panelKind: $("source-kind"),
    panelLocator: $("source-locator"),
    panelLink: $("source-link"),
    panelHeading: $("source-heading"),
    panelText: $("source-text"),
    panelPreview: $("source-preview"),
    panelAssets: $("source-assets"),
    closePanel: $("close-panel"),
    examples: $("examples"),
    examplesTitle: $("examples-title"),
    exampleList: $("example-list"),
    toggleSidebar: $("toggle-sidebar"),
  };

  var state = {
    kb: null,
    conversationId: null,
    streaming: null, // {controller, view}
    loadToken: 0, // the latest conversation load wins
  };

  var views = new WeakMap(); // <li> of an answer → its view

  // --- small helpers ------------------------------------------------------------------------

  // Bidirectional embeddings, overrides and isolates in a document's text would make what
  // follows them read in another order ("txt.exe" shown as "exe.txt"). They are shown as U+FFFD,
  // one for one, so offsets into the text (support spans) stay right.
  var BIDI_CONTROLS = /[\u202a-\u202e\u2066-\u2069]/g;

  function plain(text) {
    return String(text).replace(BIDI_CONTROLS, "\ufffd");
  }

  function node(tag, className, text) {
    var element = document.createElement(tag);
    if (className) element.className = className;
    if (text !== undefined && text !== null) element.textContent = plain(text);
    return element;
  }

  var answerMarkdown = window.ragsiteAnswerMarkdown;  // answer_markdown.js
  var escapeHtml = answerMarkdown.escapeHtml;

  function csrfToken() {
    var name = config.csrf_cookie_name + "=";
    var cookies = document.cookie ? document.cookie.split(";") : [];
    for (var i = 0; i < cookies.length; i++) {
      var cookie = cookies[i].trim();
      if (cookie.indexOf(name) === 0) return decodeURIComponent(cookie.slice(name.length));
    }
    return config.csrf_token;
  }

  function headers(extra) {
    var out = { Accept: "application/json", "Accept-Language": config.language };
    for (var key in extra || {}) out[key] = extra[key];
    return out;
  }

  function getJson(url) {
    return fetch(url, { headers: headers(), credentials: "same-origin" }).then(function (response) {
      return response
        .json()
        .catch(function () {
          return null;
        })
        .then(function (body) {
          if (!response.ok) {
            var error = new Error((body && body.detail) || t("error"));
            error.status = response.status;
            throw error;
          }
          return body;
        });
    });
  }

  function setStatus(text) {
    el.status.textContent = text || "";
  }

  function isNearBottom() {
    var box = el.messages;
    return box.scrollHeight - box.scrollTop - box.clientHeight < 80;
  }

  function scrollToBottom() {
    el.messages.scrollTop = el.messages.scrollHeight;
  }

  // --- URL and knowledge base ---------------------------------------------------------------

  function updateUrl() {
    var params = new URLSearchParams(window.location.search);
    if (state.kb) params.set("kb", state.kb);
    else params.delete("kb");
    if (state.conversationId) params.set("c", state.conversationId);
    else params.delete("c");
    var query = params.toString();
    window.history.replaceState(null, "", window.location.pathname + (query ? "?" + query : ""));
    // Language links keep the knowledge base and conversation.
    document.querySelectorAll("a[hreflang]").forEach(function (link) {
      var own = new URLSearchParams(params);
      own.set("lang", link.getAttribute("hreflang"));
      link.setAttribute("href", "?" + own.toString());
    });
  }

  function knownKb(slug) {
    return config.knowledge_bases.some(function (kb) {
      return kb.id === slug;
    });
  }

  function linkHostsOf(slug) {
    var kb = config.knowledge_bases.filter(function (item) {
      return item.id === slug;
    })[0];
    return (kb && kb.link_hosts) || [];
  }

  function examplesOf(slug) {
    var kb = config.knowledge_bases.filter(function (item) {
      return item.id === slug;
    })[0];
    return (kb && kb.examples) || [];
  }

  // An empty conversation offers the chosen base's most asked FAQ questions; one click asks it.
  function renderExamples() {
    var questions = el.messages.childElementCount ? [] : examplesOf(state.kb);
    el.exampleList.textContent = "";
    el.examplesTitle.textContent = t("examples");
    questions.forEach(function (question) {
      var item = node("li");
      var button = node("button", "example", question);
      button.type = "button";
      button.setAttribute("data-question", question);
      item.appendChild(button);
      el.exampleList.appendChild(item);
    });
    el.examples.hidden = questions.length === 0;
  }

  // The other knowledge bases ticked under "同时检索": the question reads them with the chosen one.
  function alsoBoxes() {
    return el.alsoBox ? Array.prototype.slice.call(el.alsoBox.querySelectorAll("input[name=also]")) : [];
  }

  function alsoKbs() {
    return alsoBoxes().filter(function (box) {
      return box.checked && box.value !== state.kb;
    }).map(function (box) {
      return box.value;
    });
  }

  function syncAlso() {
    // The chosen knowledge base is always read: its box is shown ticked and fixed.
    alsoBoxes().forEach(function (box) {
      var own = box.value === state.kb;
      box.disabled = own;
      if (own) box.checked = true;
      else if (box.getAttribute("data-own") === "1") box.checked = false;
      box.setAttribute("data-own", own ? "1" : "0");
    });
    if (el.alsoCount) {
      var count = alsoKbs().length;
      el.alsoCount.textContent = count ? " +" + count : "";
    }
  }

  // --- links ----------------------------------------------------------------------------------

  // The same forms and matching as knowledge/links.py: a plainly written host (no user part, no
  // backslash, no escapes), then only a port, path, query or fragment.
  var WEB_LINK = /^https?:\/\/([a-z0-9.-]+)(?::\d{1,5})?(?:[\/?#][!#-;=?-~]*)?$/i;
  var MAIL_LINK = /^mailto:[a-z0-9._%+-]+@([a-z0-9.-]+)(?:\?[!#-;=?-~]*)?$/i;
  var HOST = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$/;

  function hostAllowed(host, hosts) {
    host = host.toLowerCase().replace(/\.$/, "");
    if (!HOST.test(host)) return false;
    return hosts.some(function (entry) {
      if (entry.indexOf("*.") === 0) {
        return host.length > entry.length - 1 && host.slice(-(entry.length - 1)) === entry.slice(1);
      }
      return host === entry;
    });
  }

  function linkAllowed(href, hosts) {
    if (/(citation|asset|javascript|vbscript)\s*:/i.test(href.replace(/^mailto:/i, ""))) return false;
    var match = WEB_LINK.exec(href) || MAIL_LINK.exec(href);
    return Boolean(match) && hostAllowed(match[1], hosts);
  }

  function selectKb(slug) {
    state.kb = slug;
    el.kbSelect.value = slug;
    syncAlso();
    renderExamples();
    try {
      window.localStorage.setItem(STORAGE_KEY, slug);
    } catch (e) {
      /* storage may be disabled: the choice then lasts for this page only */
    }
  }

  // --- markdown -------------------------------------------------------------------------------

  // Which answer line (as the server counts them for `spans[*].line`) each citation marker is on:
  // the same rules as chat.pipeline.confidence.fact_units.
  var CITATION_MARK = /\[来源 (\d+)\]\(citation:\/\/(\d+)\)/g;
  var IMAGE_MARK = /!\[[^\]\n]*\]\(asset:\/\/\d+\)/g;
  var TABLE_RULE = /^\s*\|?\s*:?-{2,}/;

  function annotateLines(text) {
    var tail = text.indexOf("\n\n参考来源：");
    var body = tail >= 0 ? text.slice(0, tail) : text;
    var rest = tail >= 0 ? text.slice(tail) : "";
    var lines = body.split("\n");
    var units = 0;
    var tableLines = [];
    var lineUnit = new Array(lines.length).fill(-1);
    for (var i = 0; i < lines.length; i++) {
      var line = lines[i].trim();
      if (line.charAt(0) === "|") {
        if (!TABLE_RULE.test(line.replace(/^\|+|\|+$/g, "").trim())) tableLines.push(i);
        continue;
      }
      if (tableLines.length) {
        var tableUnit = units++;
        tableLines.forEach(function (index) {
          lineUnit[index] = tableUnit;
        });
        tableLines = [];
        if (line && !line.replace(CITATION_MARK, "").trim()) {
          lineUnit[i] = tableUnit;
          continue;
        }
      }
      if (!line || !line.replace(IMAGE_MARK, "").trim()) continue;
      lineUnit[i] = units++;
    }
    if (tableLines.length) {
      var last = units++;
      tableLines.forEach(function (index) {
        lineUnit[index] = last;
      });
    }
    var out = lines.map(function (raw, index) {
      return raw.replace(CITATION_MARK, function (whole, shown, number) {
        return "[来源 " + shown + "](citation://" + number + "/" + lineUnit[index] + ")";
      });
    });
    return out.join("\n") + rest;
  }

  var renderContext = { numbers: new Set(), assets: new Set(), hosts: [] };

  var markdown = new window.marked.Marked({ gfm: true, breaks: true, async: false });
  markdown.use({
    renderer: {
      html: answerMarkdown.rawHtml,
      link: function (token) {
        var inner = this.parser.parseInline(token.tokens);
        var href = String(token.href || "");
        var cite = /^citation:\/\/(\d+)(?:\/(-?\d+))?$/.exec(href);
        if (cite) {
          var number = parseInt(cite[1], 10);
          if (!renderContext.numbers.has(number)) return inner;
          var line = cite[2] !== undefined ? cite[2] : "-1";
          // The marker is written "[来源 N]" in every language (it is the answer's wire format);
          // the badge reads in the page's language.
          var shown = /(\d+)\s*$/.exec(inner);
          var label = shown ? escapeHtml(t("source") + " " + shown[1]) : inner;
          return (
            '<button type="button" class="cite" data-cite="' + number + '" data-line="' + line + '">' +
            label + "</button>"
          );
        }
        if (linkAllowed(href, renderContext.hosts)) {
          return '<a href="' + escapeHtml(href) + '">' + inner + "</a>";
        }
        return answerMarkdown.shownAddress(token, inner);
      },
      image: function (token) {
        return answerMarkdown.assetImage(token, renderContext.assets, config.urls.assets, "answer-image");
      },
    },
  });

  var ASSET_SRC = new RegExp("^" + config.urls.assets.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&") + "(\\d+)$");

  window.DOMPurify.addHook("afterSanitizeAttributes", function (element) {
    if (element.tagName === "IMG") {
      var match = ASSET_SRC.exec(element.getAttribute("src") || "");
      if (!match || !renderContext.assets.has(parseInt(match[1], 10))) element.remove();
    } else if (element.tagName === "A") {
      if (!linkAllowed(element.getAttribute("href") || "", renderContext.hosts)) {
        element.replaceWith(document.createTextNode(element.textContent));
        return;
      }
      element.setAttribute("rel", "noopener noreferrer nofollow");
      element.setAttribute("target", "_blank");
    } else if (element.tagName === "BUTTON") {
      var number = parseInt(element.getAttribute("data-cite") || "", 10);
      if (!renderContext.numbers.has(number)) element.replaceWith(document.createTextNode(element.textContent));
    }
  });

  var PURIFY = {
    ALLOWED_TAGS: answerMarkdown.TAGS.concat(["a", "img", "button", "span"]),
    ALLOWED_ATTR: ["href", "src", "alt", "title", "class", "type", "align", "start", "data-cite", "data-line"],
    ALLOW_DATA_ATTR: false,
    ALLOWED_URI_REGEXP: answerMarkdown.URI,
  };

  function citationSets(citations, hosts) {
    var numbers = new Set();
    var assets = new Set();
    (citations || []).forEach(function (citation) {
      numbers.add(citation.number);
      (citation.assets || []).forEach(function (asset) {
        if (Number.isInteger(asset.id)) assets.add(asset.id);
      });
    });
    return { numbers: numbers, assets: assets, hosts: hosts || [] };
  }

  function renderMarkdown(target, text, citations, hosts) {
    renderContext = citationSets(citations, hosts);
    var html = markdown.parse(annotateLines(text || ""));
    target.innerHTML = window.DOMPurify.sanitize(html, PURIFY);
  }

  // --- messages -------------------------------------------------------------------------------

  function addUserMessage(text) {
    var item = node("li", "msg user");
    item.appendChild(node("div", "bubble", text));
    el.messages.appendChild(item);
    el.examples.hidden = true;
    return item;
  }

  function createAssistantView(kbSlug, alsoSlugs) {
    var item = node("li", "msg assistant");
    var view = {
      kb: kbSlug,
      linkHosts: [kbSlug].concat(alsoSlugs || []).reduce(function (hosts, slug) {
        return hosts.concat(linkHostsOf(slug));
      }, []),
      el: item,
      meta: node("div", "msg-meta"),
      answer: node("div", "answer markdown"),
      note: node("p", "msg-note"),
      error: node("p", "msg-error"),
      sources: node("div", "sources"),
      choices: node("div", "clarify"),
      feedbackBar: node("div", "feedback"),
      clarify: null,
      messageId: null,
      feedback: null, // {verdict, reason} the reader gave, as the server stored it
      text: "",
      citations: [],
      confidence: null,
      hitType: null,
      renderQueued: false,
    };
    view.note.hidden = true;
    view.error.hidden = true;
    view.error.setAttribute("role", "alert");
    view.sources.hidden = true;
    view.choices.hidden = true;
    view.feedbackBar.hidden = true;
    view.meta.hidden = true;
    item.appendChild(view.meta);
    item.appendChild(view.answer);
    item.appendChild(view.choices);
    item.appendChild(view.note);
    item.appendChild(view.error);
    item.appendChild(view.sources);
    item.appendChild(view.feedbackBar);
    el.messages.appendChild(item);
    views.set(item, view);
    return view;
  }

  function renderView(view) {
    view.renderQueued = false;
    var follow = isNearBottom();
    renderMarkdown(view.answer, view.text, view.citations, view.linkHosts);
    if (follow) scrollToBottom();
  }

  function queueRender(view) {
    if (view.renderQueued) return;
    view.renderQueued = true;
    window.requestAnimationFrame(function () {
      renderView(view);
    });
  }

  function renderMeta(view) {
    view.meta.textContent = "";
    var confidence = view.confidence;
    // A clarifying question states nothing to be confident about: no badge.
    if (confidence && confidence.level && view.hitType !== "clarify") {
      var level = ["high", "medium", "low"].indexOf(confidence.level) >= 0 ? confidence.level : "low";
      var badge = node("details", "confidence-badge");
      badge.setAttribute("data-level", level);
      var summary = node("summary", "badge level-" + level, t("level_" + level));
      var reasons = (confidence.reasons || []).map(function (reason) {
        return t("reason_" + reason) === "reason_" + reason ? reason : t("reason_" + reason);
      });
      summary.title = reasons.join("；");
      badge.appendChild(summary);
      var list = node("ul", "reasons");
      reasons.forEach(function (reason) {
        list.appendChild(node("li", null, reason));
      });
      badge.appendChild(list);
      view.meta.appendChild(badge);
    }
    if (view.hitType) {
      var key = "hit_" + view.hitType;
      var tag = node("span", "tag hit-type", t(key) === key ? view.hitType : t(key));
      tag.setAttribute("data-hit-type", view.hitType);
      view.meta.appendChild(tag);
    }
    view.meta.hidden = !view.meta.childNodes.length;
  }

  // A clarifying question's choices: each asks the question again about that item.
  function renderClarify(view) {
    view.choices.textContent = "";
    var clarify = view.clarify;
    if (!clarify || !clarify.choices || !clarify.choices.length) {
      view.choices.hidden = true;
      return;
    }
    view.choices.appendChild(node("p", "clarify-title", t("clarify_choices")));
    var list = node("div", "clarify-choices");
    clarify.choices.forEach(function (choice) {
      var button = node("button", "clarify-choice", choice.name);
      button.type = "button";
      button.setAttribute("data-item-id", String(choice.item_id));
      list.appendChild(button);
    });
    view.choices.appendChild(list);
    view.choices.hidden = false;
  }

  // 👍 / 👎 under a finished answer; the reader may change or withdraw it (pressed again).
  // A 👎 opens a field for what was wrong, sent with the verdict.
  function renderFeedback(view, note) {
    var bar = view.feedbackBar;
    bar.textContent = "";
    if (!view.messageId || view.hitType === "clarify") {
      bar.hidden = true;
      return;
    }
    var verdict = view.feedback ? view.feedback.verdict : null;
    ["up", "down"].forEach(function (kind) {
      var button = node("button", "feedback-button");
      button.type = "button";
      button.appendChild(thumb(kind));
      button.appendChild(node("span", null, t("feedback_" + kind)));
      button.setAttribute("aria-pressed", String(verdict === kind));
      button.setAttribute("data-verdict", kind);
      button.addEventListener("click", function () {
        sendFeedback(view, verdict === kind ? null : kind, "");
      });
      bar.appendChild(button);
    });
    if (verdict === "down") {
      var form = node("form", "feedback-reason");
      var input = node("input");
      input.type = "text";
      input.maxLength = 1000;
      input.placeholder = t("feedback_reason");
      input.setAttribute("aria-label", t("feedback_reason"));
      input.value = view.feedback.reason || "";
      var send = node("button", null, t("feedback_send"));
      send.type = "submit";
      form.appendChild(input);
      form.appendChild(send);
      form.addEventListener("submit", function (event) {
        event.preventDefault();
        sendFeedback(view, "down", input.value);
      });
      bar.appendChild(form);
    }
    if (note) bar.appendChild(node("span", "feedback-note", note));
    bar.hidden = false;
  }

  // A thumb drawn as SVG: emoji fonts are not on every machine (a box would show instead).
  var THUMB_UP = "M2 10h4v11H2zM8 21h9.2a2 2 0 0 0 2-1.6l1.6-7A2 2 0 0 0 18.8 10H14l.9-4.4A1.8 1.8 0 0 0 11.6 4L8 10z";

  function thumb(kind) {
    var svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    svg.setAttribute("viewBox", "0 0 24 24");
    svg.setAttribute("aria-hidden", "true");
    svg.setAttribute("class", "thumb thumb-" + kind);
    var path = document.createElementNS("http://www.w3.org/2000/svg", "path");
    path.setAttribute("d", THUMB_UP);
    svg.appendChild(path);
    return svg;
  }

  function sendFeedback(view, verdict, reason) {
    var url = config.urls.feedback.replace(/\/0\/feedback$/, "/" + encodeURIComponent(view.messageId) + "/feedback");
    fetch(url, {
      method: verdict ? "PUT" : "DELETE",
      credentials: "same-origin",
      headers: headers({ "Content-Type": "application/json", "X-CSRFToken": csrfToken() }),
      body: verdict ? JSON.stringify({ verdict: verdict, reason: reason || "" }) : undefined,
    })
      .then(function (response) {
        if (!response.ok) throw new Error(String(response.status));
        return verdict ? response.json() : null;
      })
      .then(function (stored) {
        view.feedback = stored;
        renderFeedback(view, stored ? t("feedback_thanks") : "");
      })
      .catch(function () {
        renderFeedback(view, t("feedback_failed"));
      });
  }

  function renderSources(view) {
    view.sources.textContent = "";
    var citations = view.citations || [];
    if (!citations.length) {
      view.sources.hidden = true;
      return;
    }
    view.sources.appendChild(node("h3", "sources-title", t("sources")));
    var list = node("ul", "source-list");
    citations.forEach(function (citation) {
      var item = node("li");
      var button = node("button", "source-chip" + (citation.cited ? " cited" : ""));
      button.type = "button";
      button.setAttribute("data-cite", String(citation.number));
      button.appendChild(node("span", "source-number", "[" + citation.number + "]"));
      button.appendChild(document.createTextNode(" " + plain(citation.title || "")));
      if (citation.knowledge_base && citation.knowledge_base !== view.kb) {
        button.appendChild(node("span", "source-kb", " · " + plain(citation.knowledge_base_name || citation.knowledge_base)));
      }
      var label = locatorLabel(citation);
      if (label) button.appendChild(node("span", "source-locator", " · " + label));
      item.appendChild(button);
      if (citation.kind === "web") item.appendChild(webSourceLine(citation));
      list.appendChild(item);
    });
    view.sources.appendChild(list);
    view.sources.hidden = false;
  }

  // A web source is none of the knowledge base's content: it says so, names its site and shows
  // its whole address as a link that only a click opens (in a new tab, without the referrer);
  // the page never fetches it, its preview or any image of it.
  function webLink(url) {
    if (typeof url !== "string" || !/^https?:\/\/[^\s]+$/i.test(url)) return node("span", "web-url", url || "");
    var link = node("a", "web-url", url);
    link.href = url;
    link.target = "_blank";
    link.rel = "noopener noreferrer nofollow";
    link.referrerPolicy = "no-referrer";
    return link;
  }

  function webSourceLine(citation) {
    var line = node("div", "source-web");
    line.appendChild(node("span", "web-label", t("web_source")));
    if (citation.site) line.appendChild(node("span", "web-site", " · " + citation.site + " · "));
    else line.appendChild(document.createTextNode(" · "));
    line.appendChild(webLink(citation.url));
    return line;
  }

  function showNote(view, text) {
    view.note.textContent = text;
    view.note.hidden = !text;
  }

  function showError(view, text) {
    view.error.textContent = text;
    view.error.hidden = !text;
    view.el.classList.add("has-error");
  }

  function clearMessages() {
    el.messages.textContent = "";
    closePanel();
    renderExamples();
  }

  // --- side panel -----------------------------------------------------------------------------

  function format(key, values) {
    return t(key).replace(/\{(\w+)\}/g, function (whole, name) {
      return values[name] !== undefined ? String(values[name]) : whole;
    });
  }

  function locatorLabel(citation) {
    if (citation.locator_label) return citation.locator_label;
    // Chunk locators are ranges (page_start…); the server's label does not read them yet.
    var locator = citation.locator || {};
    var page = locator.page || locator.page_start;
    if (page) {
      var end = locator.page_end && locator.page_end !== page ? "–" + locator.page_end : "";
      return format("locator_page", { page: page + end });
    }
    if (locator.sheet) return format("locator_sheet", { sheet: locator.sheet, cells: locator.cell_range || locator.range || "" }).trim();
    if (locator.slide) return format("locator_slide", { slide: locator.slide });
    var line = locator.line || locator.line_start;
    if (line) return format("locator_line", { line: line });
    return "";
  }

  function highlightRanges(text, spans) {
    // Offsets are in code points (Python); JavaScript strings count UTF-16 units.
    var chars = Array.from(plain(text));
    var ranges = [];
    spans.forEach(function (span) {
      var start = span.text_start;
      var end = span.text_end;
      if (Number.isInteger(start) && Number.isInteger(end) && start >= 0 && end > start && end <= chars.length) {
        ranges.push([start, end]);
      } else if (span.text) {
        var at = chars.join("").indexOf(plain(span.text));
        if (at >= 0) {
          var before = Array.from(chars.join("").slice(0, at)).length;
          ranges.push([before, before + Array.from(span.text).length]);
        }
      }
    });
    ranges.sort(function (a, b) {
      return a[0] - b[0];
    });
    var merged = [];
    ranges.forEach(function (range) {
      var last = merged[merged.length - 1];
      if (last && range[0] <= last[1]) last[1] = Math.max(last[1], range[1]);
      else merged.push(range.slice());
    });
    var fragment = document.createDocumentFragment();
    var position = 0;
    merged.forEach(function (range) {
      if (range[0] > position) fragment.appendChild(document.createTextNode(chars.slice(position, range[0]).join("")));
      fragment.appendChild(node("mark", "support", chars.slice(range[0], range[1]).join("")));
      position = range[1];
    });
    if (position < chars.length) fragment.appendChild(document.createTextNode(chars.slice(position).join("")));
    return fragment;
  }

  function openPanel(view, number, line) {
    var citation = (view.citations || []).filter(function (c) {
      return c.number === number;
    })[0];
    if (!citation) return;
    el.panelTitle.textContent = plain("[" + citation.number + "] " + (citation.title || ""));
    var kinds = [];
    if (citation.kind === "faq") kinds.push(t("faq"));
    if (citation.kind === "web") kinds.push(t("web_source"));
    if (citation.kind === "web" && citation.site) kinds.push(plain(citation.site));
    if (citation.knowledge_base_name) kinds.push(plain(citation.knowledge_base_name));
    el.panelKind.textContent = kinds.join(" · ");
    el.panelKind.hidden = !kinds.length;
    var label = locatorLabel(citation);
    el.panelLocator.textContent = plain(label);
    el.panelLocator.hidden = !label;
    if (el.panelLink) {
      el.panelLink.textContent = "";
      if (citation.kind === "web") el.panelLink.appendChild(webLink(citation.url));
      el.panelLink.hidden = citation.kind !== "web";
    }
    var heading = (citation.heading_path || []).join(" › ");
    el.panelHeading.textContent = plain(heading);
    el.panelHeading.hidden = !heading;

    var spans = citation.spans || [];
    if (line !== null && line >= 0) {
      var own = spans.filter(function (span) {
        return span.line === line;
      });
      if (own.length) spans = own;
    }
    el.panelText.textContent = "";
    el.panelText.appendChild(highlightRanges(citation.text || "", spans));

    var image = el.panelPreview.querySelector("img");
    if (typeof citation.preview_url === "string" && /^\/api\/chunks\/\d+\/preview$/.test(citation.preview_url)) {
      image.src = citation.preview_url;
      el.panelPreview.hidden = false;
    } else {
      image.removeAttribute("src");
      el.panelPreview.hidden = true;
    }

    el.panelAssets.textContent = "";
    (citation.assets || []).forEach(function (asset) {
      if (!Number.isInteger(asset.id)) return;
      var figure = node("figure", "panel-asset");
      var img = document.createElement("img");
      img.src = config.urls.assets + asset.id;
      img.alt = asset.caption || t("images");
      img.setAttribute("data-asset", String(asset.id));
      figure.appendChild(img);
      if (asset.caption) figure.appendChild(node("figcaption", null, asset.caption));
      el.panelAssets.appendChild(figure);
    });

    el.panel.hidden = false;
    document.body.classList.add("panel-open");
    el.panel.focus({ preventScroll: true });
    var first = el.panelText.querySelector("mark.support");
    if (first) first.scrollIntoView({ block: "center" });
  }

  function closePanel() {
    el.panel.hidden = true;
    document.body.classList.remove("panel-open");
  }

  el.panelPreview.querySelector("img").addEventListener("error", function () {
    el.panelPreview.hidden = true;
  });

  // --- conversations --------------------------------------------------------------------------

  function loadConversations() {
    if (!state.kb) return Promise.resolve();
    var kb = state.kb;
    return getJson(config.urls.conversations + "?knowledge_base_id=" + encodeURIComponent(kb))
      .then(function (page) {
        if (kb !== state.kb) return;
        renderConversationList((page && page.results) || []);
      })
      .catch(function () {
        renderConversationList([]);
      });
  }

  function renderConversationList(items) {
    el.list.textContent = "";
    if (!items.length) {
      el.list.appendChild(node("li", "empty", t("no_conversations")));
      return;
    }
    items.forEach(function (item) {
      var li = node("li");
      var button = node("button", "conversation-item", item.title || "…");
      button.type = "button";
      button.setAttribute("data-id", item.id);
      if (item.id === state.conversationId) button.setAttribute("aria-current", "true");
      li.appendChild(button);
      el.list.appendChild(li);
    });
  }

  function markCurrentConversation() {
    el.list.querySelectorAll(".conversation-item").forEach(function (button) {
      if (button.getAttribute("data-id") === state.conversationId) button.setAttribute("aria-current", "true");
      else button.removeAttribute("aria-current");
    });
  }

  function setConversation(id) {
    state.conversationId = id;
    updateUrl();
    markCurrentConversation();
  }

  function openConversation(id) {
    stopStreaming();
    var token = ++state.loadToken;
    clearMessages();
    setConversation(id);
    return getJson(config.urls.conversations + "/" + encodeURIComponent(id))
      .then(function (conversation) {
        if (token !== state.loadToken) return;
        if (conversation.knowledge_base_id !== state.kb && knownKb(conversation.knowledge_base_id)) {
          selectKb(conversation.knowledge_base_id);
          updateUrl();
          loadConversations();
        }
        renderHistory(conversation.messages || [], conversation.knowledge_base_id);
        setStatus("");
      })
      .catch(function (error) {
        if (token !== state.loadToken) return;
        setConversation(null);
        setStatus(error.message || t("load_failed"));
      });
  }

  function renderHistory(messages, kbSlug) {
    messages.forEach(function (message) {
      if (message.role === "user") {
        addUserMessage(message.content);
        return;
      }
      var view = createAssistantView(kbSlug);
      var evidence = message.evidence || {};
      view.text = message.content || "";
      view.citations = evidence.citations || [];
      view.confidence = evidence.answer_confidence || null;
      view.hitType = evidence.hit_type || null;
      view.clarify = evidence.clarify || null;
      view.messageId = message.status === "complete" ? message.id : null;
      view.feedback = message.feedback || null;
      renderView(view);
      renderMeta(view);
      renderSources(view);
      renderClarify(view);
      renderFeedback(view);
      if (message.status === "cancelled") showNote(view, t("stopped"));
      else if (message.status === "error") showError(view, t("error"));
    });
    scrollToBottom();
  }

  function newConversation() {
    stopStreaming();
    state.loadToken++;
    clearMessages();
    setConversation(null);
    setStatus("");
    el.question.focus();
  }

  // --- asking ---------------------------------------------------------------------------------

  function setStreamingUi(streaming) {
    el.send.disabled = streaming;
    el.stop.hidden = !streaming;
  }

  function stopStreaming() {
    if (state.streaming) state.streaming.controller.abort();
  }

  function parseEvents(buffer, onData) {
    // SSE: events end with a blank line; `data:` lines carry the payload.
    var separator;
    while ((separator = buffer.indexOf("\n\n")) >= 0) {
      var block = buffer.slice(0, separator);
      buffer = buffer.slice(separator + 2);
      var data = block
        .split("\n")
        .filter(function (line) {
          return line.indexOf("data:") === 0;
        })
        .map(function (line) {
          return line.slice(5).replace(/^ /, "");
        })
        .join("\n");
      if (data) onData(data);
    }
    return buffer;
  }

  function handlePart(part, view, turn) {
    switch (part.type) {
      case "data-status":
        if (part.data && part.data.message) setStatus(part.data.message);
        break;
      case "data-retrieval":
        view.citations = (part.data && part.data.citations) || [];
        if (part.data && part.data.conversation_id && !state.conversationId) {
          setConversation(part.data.conversation_id);
          loadConversations(); // the new conversation exists from now on
        }
        renderSources(view);
        break;
      case "text-start":
        setStatus(t("generating"));
        break;
      case "text-delta":
        view.text += part.delta || "";
        queueRender(view);
        break;
      case "data-clarify":
        view.clarify = part.data || null;
        renderClarify(view);
        break;
      case "data-answer":
        var data = part.data || {};
        view.citations = data.citations || view.citations;
        view.confidence = data.answer_confidence || null;
        view.hitType = data.hit_type || null;
        if (data.conversation_id && data.conversation_id !== state.conversationId) setConversation(data.conversation_id);
        view.messageId = data.message_id || null;
        turn.answered = true;
        renderView(view);
        renderMeta(view);
        renderSources(view);
        renderFeedback(view);
        break;
      case "error":
        turn.failed = true;
        showError(view, part.errorText || t("error"));
        break;
      default:
        break;
    }
  }

  function readStream(response, view, turn) {
    var reader = response.body.getReader();
    var decoder = new TextDecoder();
    var buffer = "";
    function onData(data) {
      if (data === "[DONE]") {
        turn.done = true;
        return;
      }
      var part;
      try {
        part = JSON.parse(data);
      } catch (e) {
        return;
      }
      handlePart(part, view, turn);
    }
    function pump() {
      return reader.read().then(function (result) {
        if (result.done) {
          buffer += decoder.decode();
          parseEvents(buffer.replace(/\r\n/g, "\n") + "\n\n", onData);
          return;
        }
        buffer += decoder.decode(result.value, { stream: true });
        // A "\r" at the very end may be half of a "\r\n" split across chunks.
        buffer = parseEvents(buffer.replace(/\r\n/g, "\n"), onData);
        return pump();
      });
    }
    return pump();
  }

  function ask(question, itemIds) {
    if (!state.kb) {
      setStatus(t("no_knowledge_base"));
      return;
    }
    if (state.streaming) return;
    closePanel();
    addUserMessage(question);
    var also = alsoKbs();
    var view = createAssistantView(state.kb, also);
    view.el.classList.add("streaming");
    scrollToBottom();
    var controller = new AbortController();
    var turn = { answered: false, failed: false, done: false };
    state.streaming = { controller: controller, view: view };
    var token = state.loadToken;
    setStreamingUi(true);
    setStatus(t("searching"));
    var body = { knowledge_base_id: state.kb, question: question };
    if (also.length) body.knowledge_base_ids = [state.kb].concat(also);
    if (state.conversationId) body.conversation_id = state.conversationId;
    if (itemIds && itemIds.length) body.item_ids = itemIds;

    fetch(config.urls.stream, {
      method: "POST",
      credentials: "same-origin",
      headers: headers({ "Content-Type": "application/json", "X-CSRFToken": csrfToken() }),
      body: JSON.stringify(body),
      signal: controller.signal,
    })
      .then(function (response) {
        var type = response.headers.get("Content-Type") || "";
        if (!response.ok || type.indexOf("text/event-stream") !== 0) {
          return response
            .json()
            .catch(function () {
              return null;
            })
            .then(function (payload) {
              showError(view, (payload && payload.detail) || t("error"));
              if (!el.question.value) el.question.value = question;
            });
        }
        return readStream(response, view, turn).then(function () {
          if (!turn.answered && !turn.failed) showError(view, t("network_error"));
        });
      })
      .catch(function (error) {
        if (error && error.name === "AbortError") {
          showNote(view, t("stopped"));
        } else {
          showError(view, t("network_error"));
        }
      })
      .then(function () {
        renderView(view);
        view.el.classList.remove("streaming");
        if (state.streaming && state.streaming.view === view) state.streaming = null;
        setStreamingUi(false);
        setStatus("");
        if (token === state.loadToken) loadConversations();
      });
  }

  // --- events ---------------------------------------------------------------------------------

  el.composer.addEventListener("submit", function (event) {
    event.preventDefault();
    var question = el.question.value.trim();
    if (!question || state.streaming) return;
    el.question.value = "";
    ask(question);
  });

  el.question.addEventListener("keydown", function (event) {
    // Enter while an input method is composing (Chinese) picks a candidate, not a send.
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing && event.keyCode !== 229) {
      event.preventDefault();
      el.composer.requestSubmit();
    }
  });

  el.exampleList.addEventListener("click", function (event) {
    var button = event.target.closest("button[data-question]");
    if (!button || state.streaming) return;
    ask(button.getAttribute("data-question"));
  });

  el.stop.addEventListener("click", stopStreaming);
  el.newConversation.addEventListener("click", newConversation);
  el.closePanel.addEventListener("click", closePanel);

  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && !el.panel.hidden) closePanel();
  });

  alsoBoxes().forEach(function (box) {
    box.addEventListener("change", syncAlso);
  });

  el.kbSelect.addEventListener("change", function () {
    selectKb(el.kbSelect.value);
    newConversation();
    loadConversations();
  });

  el.list.addEventListener("click", function (event) {
    var button = event.target.closest(".conversation-item");
    if (!button) return;
    document.body.classList.remove("sidebar-open");
    el.toggleSidebar.setAttribute("aria-expanded", "false");
    openConversation(button.getAttribute("data-id"));
  });

  el.messages.addEventListener("click", function (event) {
    var choice = event.target.closest("button[data-item-id]");
    if (choice) {
      var owner = views.get(choice.closest("li.msg"));
      if (owner && owner.clarify && !state.streaming) {
        ask(owner.clarify.question, [parseInt(choice.getAttribute("data-item-id"), 10)]);
      }
      return;
    }
    var button = event.target.closest("button[data-cite]");
    if (!button) return;
    var item = button.closest("li.msg");
    var view = item && views.get(item);
    if (!view) return;
    var line = button.classList.contains("cite") ? parseInt(button.getAttribute("data-line") || "-1", 10) : null;
    openPanel(view, parseInt(button.getAttribute("data-cite"), 10), line);
  });

  el.toggleSidebar.addEventListener("click", function () {
    var open = document.body.classList.toggle("sidebar-open");
    el.toggleSidebar.setAttribute("aria-expanded", open ? "true" : "false");
  });

  // --- start ----------------------------------------------------------------------------------

  (function start() {
    var params = new URLSearchParams(window.location.search);
    var stored = null;
    try {
      stored = window.localStorage.getItem(STORAGE_KEY);
    } catch (e) {
      stored = null;
    }
    var wanted = [params.get("kb"), stored].filter(function (slug) {
      return slug && knownKb(slug);
    })[0];
    if (!wanted && config.knowledge_bases.length) wanted = config.knowledge_bases[0].id;
    if (wanted) selectKb(wanted);
    var conversation = params.get("c");
    updateUrl();
    loadConversations();
    if (conversation) openConversation(conversation);
    document.documentElement.setAttribute("data-chat-ready", "true");
  })();
})();
