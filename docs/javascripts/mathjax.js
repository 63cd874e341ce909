// MathJax 3 set-up for the guide pages (arithmatex writes \( \) and \[ \]) and for the
// notebooks (mkdocs-jupyter leaves their $ $ and $$ $$ as they are). MathJax itself is
// loaded by the reader's browser (see extra_javascript in mkdocs.yml); building needs no network.
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"], ["$", "$"]],
    displayMath: [["\\[", "\\]"], ["$$", "$$"]],
    processEscapes: true,
  },
  options: { ignoreHtmlClass: "highlight|jp-OutputArea" },
};
document$.subscribe(() => {
  if (window.MathJax && MathJax.typesetPromise) {
    MathJax.startup.output.clearCache();
    MathJax.typesetClear();
    MathJax.texReset();
    MathJax.typesetPromise();
  }
});
