// Progressive enhancement only: every page works without this file.
// Asks for confirmation before a decision form is submitted.
document.addEventListener("submit", function (ev) {
  var msg = ev.target.getAttribute("data-confirm");
  if (msg && !window.confirm(msg)) ev.preventDefault();
});
