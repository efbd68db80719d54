"""The HTML report's style sheet (html_report.py puts it inline, in the page's head)."""

CSS = """
:root{--bg:#f6f7f9;--panel:#fff;--ink:#1f2933;--muted:#5f6b7a;--line:#e3e7ec;--accent:#2563eb;
--solved:#15803d;--unsolved:#b91c1c;--unsure:#b45309;--unscored:#6b7280;--changed:#fff7e0;--changed-edge:#d97706;
--mono:ui-monospace,SFMono-Regular,Menlo,Consolas,"DejaVu Sans Mono","Liberation Mono",monospace;}
*{box-sizing:border-box}
html{-webkit-text-size-adjust:100%}
body{margin:0;background:var(--bg);color:var(--ink);font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,
"Helvetica Neue","Noto Sans","Liberation Sans",Arial,sans-serif}
header.top{background:#111827;color:#f9fafb;padding:18px 28px 16px}
header.top h1{margin:2px 0 0;font-size:21px;font-weight:600;letter-spacing:.1px}
.brand{font-size:11px;text-transform:uppercase;letter-spacing:1.4px;color:#9ca3af}
main{max-width:1400px;margin:0 auto;padding:18px 24px 8px}
footer{max-width:1400px;margin:0 auto;padding:10px 24px 28px;font-size:12px}
h2{font-size:17px;margin:22px 0 10px}
h3{font-size:13px;margin:0 0 10px;color:var(--muted);font-weight:600;text-transform:uppercase;letter-spacing:.5px}
.muted{color:var(--muted)}
code,pre{font-family:var(--mono);font-size:12.5px}
.runs-line{display:flex;flex-direction:column;gap:6px;margin-bottom:14px}
.run{display:flex;flex-wrap:wrap;align-items:baseline;gap:10px}
.run code{color:var(--muted);font-size:12px;word-break:break-all}
.run-role{font-size:11px;text-transform:uppercase;letter-spacing:.6px;padding:1px 7px;border-radius:9px;
background:#dbeafe;color:#1e3a8a;font-weight:600}
.run-role.baseline{background:#e5e7eb;color:#374151}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(220px,1fr));gap:12px;margin-bottom:14px}
.card,.panel{background:var(--panel);border:1px solid var(--line);border-radius:10px;
box-shadow:0 1px 2px rgba(16,24,40,.04)}
.card{padding:12px 14px}
.card-label{font-size:12px;color:var(--muted);font-weight:600;text-transform:uppercase;letter-spacing:.5px}
.card-value{font-size:28px;font-weight:650;margin-top:2px;font-variant-numeric:tabular-nums}
.card-value .unit{font-size:15px;font-weight:500;margin-left:2px;color:var(--muted)}
.card-value .std{font-size:14px;font-weight:500;margin-left:8px;color:var(--muted)}
.card-base{font-size:13px;margin-top:2px;font-variant-numeric:tabular-nums}
.card-detail{font-size:12px;color:var(--muted);margin-top:6px}
.cell-detail{font-size:12px;color:var(--muted);white-space:nowrap}
.delta{font-weight:600;margin-left:4px;padding:0 5px;border-radius:6px;white-space:nowrap}
.delta.up{color:#14532d;background:#dcfce7}.delta.down{color:#7f1d1d;background:#fee2e2}.delta.same{color:#374151;background:#f3f4f6}
.panels{display:grid;grid-template-columns:repeat(auto-fit,minmax(360px,1fr));gap:12px}
.panel{padding:14px 16px}
.panel.wide{grid-column:1/-1}
.note{font-size:12px;color:var(--muted);margin:6px 0 0}
svg.chart{width:100%;height:auto;display:block}
svg .grid{stroke:#eceff3}svg .axis,svg .tickmark{stroke:#9aa5b1}
svg .tick,svg .legend,svg .value{font-size:11px;fill:#4b5563;font-family:inherit}
svg .value{fill:#1f2933}svg .muted{fill:#9aa5b1}
svg .axis-label{font-size:11.5px;fill:#374151;font-family:inherit}
svg .series{fill:none;stroke-width:2.2;stroke-linejoin:round}
svg.stack{width:100%;height:18px;display:block;border-radius:5px;overflow:hidden}
.stack.empty{height:18px;border-radius:5px;background:#eef0f3}
.stack-block+.stack-block{margin-top:14px}
.stack-head{display:flex;justify-content:space-between;font-size:12px;margin-bottom:4px}
.legend-list{list-style:none;padding:0;margin:8px 0 0;display:grid;
grid-template-columns:repeat(auto-fill,minmax(150px,1fr));gap:3px 14px}
.legend-list li{display:flex;align-items:center;gap:6px;font-size:13px}
.legend-list .num{margin-left:auto;font-variant-numeric:tabular-nums;font-weight:600}
.legend-list .pct{width:48px;text-align:right;font-size:12px;font-variant-numeric:tabular-nums}
svg.dot{width:10px;height:10px;flex:none}
.table-wrap{overflow-x:auto}
table{border-collapse:collapse;width:100%}
table.runs th,table.runs td{padding:6px 10px;border-bottom:1px solid var(--line);text-align:left;font-size:13px}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.queries{margin-top:6px}
.toolbar{display:flex;flex-wrap:wrap;gap:10px 14px;align-items:flex-end;background:var(--panel);
border:1px solid var(--line);border-radius:10px;padding:12px 14px}
.control{display:flex;flex-direction:column;gap:3px}
.control.grow{flex:1 1 240px}
.control label,.label-spacer{font-size:12px;color:var(--muted);font-weight:600}
input[type=search],select{font:inherit;font-size:13.5px;padding:6px 9px;border:1px solid #c9d1db;border-radius:7px;
background:#fff;color:var(--ink);min-height:34px}
input[type=search]:focus,select:focus,button:focus-visible{outline:2px solid var(--accent);outline-offset:1px}
button{font:inherit;font-size:13px;border-radius:7px;border:1px solid transparent;padding:6px 12px;cursor:pointer;
background:var(--accent);color:#fff;min-height:32px}
button.secondary{background:#fff;color:#1f2933;border-color:#c9d1db}
button.secondary:hover:not(:disabled){background:#f1f5f9}
button:disabled{opacity:.45;cursor:default}
button.link{background:none;border:none;color:#1d4ed8;padding:2px 0;min-height:0;font-size:12.5px;
text-decoration:underline}
.listbar{display:flex;justify-content:space-between;align-items:center;margin:12px 2px 8px;gap:10px;flex-wrap:wrap}
#count{font-weight:600}
.pager{display:flex;align-items:center;gap:10px}
table.qtable{background:var(--panel);border:1px solid var(--line);border-radius:10px;
border-collapse:separate;border-spacing:0;overflow:hidden}
.qtable th{font-size:12px;text-align:left;color:var(--muted);font-weight:600;padding:8px 10px;background:#f9fafb;
border-bottom:1px solid var(--line);white-space:nowrap}
.qtable td{padding:7px 10px;border-bottom:1px solid #eef0f3;vertical-align:top;font-size:13px}
.qtable tr.qrow{cursor:pointer}
.qtable tr.qrow:hover td{background:#f5f8ff}
.qtable tr.qrow.open td{background:#eef4ff}
.qtable tr.qrow.changed td:first-child{box-shadow:inset 4px 0 0 var(--changed-edge)}
.qtable tr.qrow.changed td{background:var(--changed)}
.qtable tr.qrow.changed.open td{background:#fdeec4}
.qtable .qcol{width:46%}
.qid{font-family:var(--mono);font-weight:600;color:#1d4ed8;background:none;border:none;padding:0;min-height:0;
font-size:12.5px;text-align:left;cursor:pointer}
.qtext{display:-webkit-box;-webkit-line-clamp:2;-webkit-box-orient:vertical;overflow:hidden;color:#374151}
.group{font-size:12px;color:#374151;white-space:nowrap}
.pills{display:flex;gap:3px;flex-wrap:nowrap}
.pill{display:inline-flex;align-items:center;justify-content:center;min-width:22px;height:20px;border-radius:10px;
font-size:11.5px;font-weight:700;color:#fff;padding:0 6px}
.pill.solved{background:var(--solved)}.pill.unsolved{background:var(--unsolved)}.pill.unsure{background:var(--unsure)}
.pill.unscored,.pill.missing,.pill.other{background:var(--unscored)}
.pills.faint .pill{background:#fff;border:1.5px solid currentColor;font-weight:700}
.pills.faint .pill.solved{color:var(--solved)}.pills.faint .pill.unsolved{color:var(--unsolved)}
.pills.faint .pill.unsure{color:var(--unsure)}
.pills.faint .pill.unscored,.pills.faint .pill.missing,.pills.faint .pill.other{color:var(--unscored)}
.badges{display:flex;flex-wrap:wrap;gap:4px;min-width:300px}
.badge{display:inline-flex;align-items:center;gap:5px;border:1px solid var(--line);border-radius:10px;padding:0 7px;
font-size:11.5px;line-height:19px;background:#fff;white-space:nowrap;color:#1f2933}
.badge .bdot{width:8px;height:8px;border-radius:50%;display:inline-block}
.badge b{font-variant-numeric:tabular-nums}
.was{font-size:11px;color:var(--muted);white-space:nowrap}
.tag{display:inline-block;font-size:11px;font-weight:600;border-radius:6px;padding:0 6px;
background:#fde68a;color:#78350f;margin-left:4px}
tr.detail>td{background:#fbfcfe;padding:0;border-bottom:2px solid #c7d2fe}
.trajectory{padding:14px 18px 18px;max-width:1200px}
.traj-head{display:flex;flex-wrap:wrap;gap:8px 18px;align-items:center;margin-bottom:8px}
.traj-head .qid-big{font-family:var(--mono);font-weight:700}
.traj-query{white-space:pre-wrap;font-size:14px;margin:0 0 12px;padding:10px 12px;
background:#fff;border:1px solid var(--line);border-radius:8px}
.traj-base{font-size:13px;margin:-4px 0 12px;display:flex;gap:8px;align-items:center;flex-wrap:wrap}
ol.steps{list-style:none;margin:0;padding:0;counter-reset:step}
li.step{position:relative;background:#fff;border:1px solid var(--line);border-radius:8px;
padding:9px 12px 10px 46px;margin-bottom:8px}
li.step::before{counter-increment:step;content:counter(step);position:absolute;left:12px;top:10px;width:22px;height:22px;
border-radius:50%;background:#eef2f7;color:#374151;font-size:11.5px;font-weight:700;display:flex;align-items:center;justify-content:center}
li.step.changed{border-color:var(--changed-edge);box-shadow:inset 3px 0 0 var(--changed-edge)}
.step-head{display:flex;flex-wrap:wrap;align-items:center;gap:8px;margin-bottom:4px}
.role{font-size:11px;font-weight:700;text-transform:uppercase;letter-spacing:.6px;padding:1px 7px;border-radius:6px;
background:#e5e7eb;color:#374151}
.role.assistant{background:#dbeafe;color:#1e3a8a}.role.tool{background:#ede9fe;color:#4c1d95}
.role.user{background:#dcfce7;color:#14532d}.role.system{background:#f3f4f6;color:#4b5563}
.key{font-family:var(--mono);font-size:11.5px;color:var(--muted);word-break:break-all}
.block-label{font-size:11.5px;font-weight:600;color:var(--muted);margin:6px 0 2px;
text-transform:uppercase;letter-spacing:.4px}
pre.text,pre.code{white-space:pre-wrap;word-break:break-word;margin:0;padding:7px 9px;border-radius:6px;max-height:none}
pre.text{font-family:inherit;font-size:13.5px;background:none;padding:0 0 2px}
pre.code{background:#f6f8fa;border:1px solid #eceff3}
.toolname{font-family:var(--mono);font-weight:700;color:#4c1d95}
.final{background:#fff;border:1px solid var(--line);border-radius:8px;padding:10px 12px;margin-top:12px}
.reasons{margin:6px 0 0;padding:0;list-style:none}
.reasons li{display:flex;gap:8px;align-items:flex-start;margin:4px 0;font-size:13px}
.empty-row td{text-align:center;color:var(--muted);padding:26px}
.error-box{background:#fee2e2;color:#7f1d1d;border:1px solid #fecaca;border-radius:8px;padding:10px 12px;margin:10px 0}
@media (max-width:760px){main{padding:12px}.qtable .qcol{width:auto}.toolbar{padding:10px}}
"""
