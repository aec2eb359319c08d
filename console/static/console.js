// Progressive enhancement only: every page works without this file, and
// the server checks everything again.
(function () {
  // A field marked data-nonblank must hold more than spaces; one with
  // data-maxbytes at most that many bytes of UTF-8 as the form sends it
  // (maxlength counts characters, the ledger bytes).
  function check(el) {
    var msg = "";
    var max = el.getAttribute("data-maxbytes");
    if (el.hasAttribute("data-nonblank") && el.value !== "" && el.value.trim() === "") {
      msg = "Write more than spaces.";
    } else if (max && window.TextEncoder) {
      // A textarea's line breaks are sent as CR LF, two bytes each,
      // though its value holds them as LF: count them as sent.
      var sent = el.tagName === "TEXTAREA" ? el.value.replace(/\r?\n/g, "\r\n") : el.value;
      var n = new TextEncoder().encode(sent).length;
      if (n > +max) msg = "At most " + max + " bytes: this is " + n + ".";
    }
    el.setCustomValidity(msg);
    return msg === "";
  }
  var fields = "[data-nonblank], [data-maxbytes]";
  document.addEventListener("input", function (ev) {
    if (ev.target.matches && ev.target.matches(fields)) check(ev.target);
  });

  // Before a decision is sent: check its fields, then ask for confirmation.
  document.addEventListener("submit", function (ev) {
    var form = ev.target, ok = true;
    form.querySelectorAll(fields).forEach(function (el) { ok = check(el) && ok; });
    if (!ok) {
      ev.preventDefault();
      form.reportValidity();
      return;
    }
    var msg = form.getAttribute("data-confirm");
    if (msg && !window.confirm(msg)) ev.preventDefault();
  });

  // A page the browser restores from its back/forward cache is as it was
  // when it was left: read it again, so that Back never shows an
  // operation, or decision forms, as they no longer are.
  window.addEventListener("pageshow", function (ev) {
    if (ev.persisted) window.location.reload();
  });

  // A page that answers a refused POST shows the operation's own address,
  // so that reloading it reads the operation again instead of posting the
  // form a second time.
  var page = document.querySelector("[data-replace-url]");
  if (page && window.history.replaceState) {
    window.history.replaceState(null, "", page.getAttribute("data-replace-url"));
  }
})();
