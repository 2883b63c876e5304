"""The figures page's script (#/figures): the day-trace figures of the running cluster.

Not the shell (page.py, which includes this) and not the data (/api/figures, built by the
controller's live_figures.py). Shows utilization over time per accelerator type and region
(a chart each, units busy over units up), queue time by priority band (p50 / p90), the
preemptions and wasted chip-hours since the controller started, and fragmentation.
"""

FIGURES_JS = r"""
let figuresHours=1;
function chipHours(x){x=Number(x||0);return x===0||x>=0.01?x.toFixed(2):x.toPrecision(2);}
function pct(x){return x==null?"—":(100*x).toFixed(0)+" %";}
function utilChart(p,i,hours){const pts=p.points,W=360,H=70;
 const t1=Date.now()/1000,t0=t1-hours*3600,maxUp=Math.max(1,...pts.map(q=>q[2]));
 const x=t=>(W*Math.max(0,t-t0)/(t1-t0)).toFixed(1),y=v=>(H-2-(H-4)*v/maxUp).toFixed(1);
 const line=k=>pts.map(q=>`${x(q[0])},${y(q[k])}`).join(" ");
 const last=pts.length?pts[pts.length-1]:null;
 return `<div class="chart util-chart" id="util-${i}" data-accelerator="${esc(p.accelerator)}" data-region="${esc(p.region)}">
  <div class="muted">${esc(p.accelerator)} · ${esc(p.region)} · last ${hours} h</div>
  <div class="v util-now">${last?pct(last[3]):"—"}</div>
  <svg width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" data-points="${pts.length}">
   <polyline class="up" style="stroke:#bbb;stroke-dasharray:3 2" points="${line(2)}"/><polyline class="busy" points="${line(1)}"/></svg>
  <div class="muted" style="font-size:12px">${last?`${last[1]} of ${last[2]} ${p.accelerator==="cpu"?"cores":"chips"} busy`:"no point yet"} · dashed: up</div></div>`;}
async function figuresPage(){
 const d=await api("/api/figures?hours="+figuresHours);
 const s=d.series||{pools:[],fragmented_chips:[]},q=d.queue||{},pre=d.preemptions||{};
 const sel=`<p>Window <select id="figures-hours">${[1,6,24].map(h=>`<option value="${h}" ${h===figuresHours?"selected":""}>last ${h} h</option>`).join("")}</select>
  <span class="muted">a point every ${esc(d.every_s)} s, kept for 24 h; counters since the controller started</span></p>`;
 const cards=`<div id="charts"><div class="chart" id="fig-preemptions"><div class="muted">Preemptions</div>
   <div class="v">${(pre.evicted||0)+(pre.machine_lost||0)}</div><div class="muted" style="font-size:12px">evicted ${pre.evicted||0} · machine lost ${pre.machine_lost||0}</div></div>
  <div class="chart" id="fig-wasted"><div class="muted">Wasted accelerator-hours</div><div class="v">${chipHours(d.wasted_chip_hours)}</div>
   <div class="muted" style="font-size:12px">chip-hours of preempted runs (upper bound)</div></div>
  <div class="chart" id="fig-fragmentation"><div class="muted">Fragmented chips</div><div class="v" id="fragmented-chips">${d.fragmented_chips==null?"—":d.fragmented_chips}</div>
   <div class="muted" style="font-size:12px">free chips no waiting gang can use</div>${spark(s.fragmented_chips.map(r=>({at:r[0],v:r[1]})),"v")}</div></div>`;
 const charts=s.pools.length?`<div id="util-charts" style="display:flex;gap:18px;flex-wrap:wrap">${s.pools.map((p,i)=>utilChart(p,i,figuresHours)).join("")}</div>`:
  `<div class="empty" id="figures-empty"><b>No samples yet.</b> The controller samples its workers every ${esc(d.every_s||10)} s;
   utilization by accelerator and region shows here once a worker has registered.</div>`;
 const bands=table("queue-bands",["Band","Queue time p50","p90","Tasks started (24 h)"],Object.entries(q).map(([b,v])=>
  [esc(b),v.p50_s==null?'<span class="muted">—</span>':dur(v.p50_s),v.p90_s==null?'<span class="muted">—</span>':dur(v.p90_s),v.count]),"band-row");
 $("content").innerHTML=sel+cards+`<h3>Utilization by accelerator and region</h3>`+charts+`<h3>Queue time by priority band</h3>`+bands;
 $("figures-hours").onchange=e=>{figuresHours=Number(e.target.value);refresh();};
}
"""
