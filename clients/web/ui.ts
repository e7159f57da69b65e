/**
 * The widget's shadow-DOM view: preview image (or video), avatar video (muted, playsinline) with a separate
 * audio element for the bot's sound, a status line, and native buttons (keyboard accessible).
 * Own opaque card colours (light or dark, following `theme` or the OS) so it reads on any page.
 */

/** What the visitor sees; derived by the element from connection state, queueing and bot state. */
export type View = 'idle' | 'microphone' | 'connecting' | 'queued' | 'listening' | 'thinking' | 'speaking' | 'ended' | 'error';

const STYLE = `
:host{display:inline-block;width:320px;max-width:100%;vertical-align:top;font:15px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;
--svc-bg:#ffffff;--svc-fg:#15171c;--svc-muted:#545b69;--svc-accent:#1f4fc7;--svc-accent-fg:#ffffff;--svc-danger:#b3261e;--svc-danger-fg:#ffffff;--svc-border:rgba(0,0,0,.16);--svc-stage:#0f1115;color-scheme:light}
:host([hidden]){display:none}
:host([theme=dark]){--svc-bg:#17191f;--svc-fg:#f2f4f8;--svc-muted:#b2b9c6;--svc-accent:#8fb0ff;--svc-accent-fg:#0b1020;--svc-danger:#ff8f87;--svc-danger-fg:#2a0906;--svc-border:rgba(255,255,255,.2);color-scheme:dark}
@media (prefers-color-scheme:dark){:host(:not([theme=light])){--svc-bg:#17191f;--svc-fg:#f2f4f8;--svc-muted:#b2b9c6;--svc-accent:#8fb0ff;--svc-accent-fg:#0b1020;--svc-danger:#ff8f87;--svc-danger-fg:#2a0906;--svc-border:rgba(255,255,255,.2);color-scheme:dark}}
*{box-sizing:border-box}
.card{background:var(--svc-bg);color:var(--svc-fg);border:1px solid var(--svc-border);border-radius:16px;overflow:hidden;box-shadow:0 6px 24px rgba(0,0,0,.18)}
.stage{position:relative;background:var(--svc-stage);min-height:120px}
.preview{display:block;width:100%;aspect-ratio:4/3;object-fit:cover;background:var(--svc-stage)}
.preview.none{visibility:hidden}
video{display:none;width:100%;height:auto;background:var(--svc-stage)}
.card[data-video=on] video.avatar{display:block}
.card[data-video=on] .preview{display:none}
.card[data-video=off] .preview-video.shown{display:block;aspect-ratio:4/3;object-fit:cover}
.badge{position:absolute;left:10px;bottom:10px;display:none;align-items:center;gap:6px;padding:4px 10px;border-radius:999px;background:rgba(0,0,0,.62);color:#fff;font-size:13px}
.card:is([data-view=listening],[data-view=thinking],[data-view=speaking],[data-view=connecting],[data-view=queued]) .badge{display:inline-flex}
.dot{width:8px;height:8px;border-radius:50%;background:#7ee2a8}
.card[data-view=speaking] .dot{background:#ffd36e;animation:pulse 1s infinite}
.card:is([data-view=connecting],[data-view=queued],[data-view=thinking]) .dot{background:#9ab8ff;animation:pulse 1.4s infinite}
@keyframes pulse{50%{opacity:.35}}
@media (prefers-reduced-motion:reduce){.dot{animation:none!important}}
.body{padding:12px 14px 14px}
.title{margin:0;font-size:17px;font-weight:600;overflow-wrap:anywhere}
.status{margin:4px 0 0;color:var(--svc-muted);min-height:1.4em;overflow-wrap:anywhere}
.card[data-view=error] .status{color:var(--svc-danger);font-weight:500}
.controls{display:flex;flex-wrap:wrap;gap:8px;margin-top:12px}
button{font:inherit;font-weight:600;min-height:44px;min-width:44px;padding:0 18px;border-radius:22px;border:1px solid var(--svc-border);background:transparent;color:var(--svc-fg);cursor:pointer}
button[hidden]{display:none}
button:focus-visible{outline:3px solid var(--svc-accent);outline-offset:2px}
.start{background:var(--svc-accent);color:var(--svc-accent-fg);border-color:transparent;flex:1 1 auto}
.hangup{background:var(--svc-danger);color:var(--svc-danger-fg);border-color:transparent}
.mute[aria-pressed=true]{background:var(--svc-fg);color:var(--svc-bg)}
.sound{display:none}
`;

const MARKUP = `<div class="card" part="card" data-view="idle" data-video="off">
<div class="stage" part="stage">
<img class="preview none" part="preview" alt="">
<video class="avatar" part="video" playsinline autoplay muted disablepictureinpicture></video>
<video class="preview-video" part="preview-video" playsinline autoplay muted loop disablepictureinpicture></video>
<span class="badge" aria-hidden="true"><span class="dot"></span><span class="badge-text"></span></span>
</div>
<div class="body">
<h2 class="title" part="title"></h2>
<p class="status" part="status" role="status" aria-live="polite"></p>
<div class="controls">
<button type="button" class="start" part="start-button">Start conversation</button>
<button type="button" class="mute" part="mute-button" aria-pressed="false" hidden>Mute</button>
<button type="button" class="hangup" part="hangup-button" hidden>Hang up</button>
<button type="button" class="sound-on" part="sound-button" hidden>Turn on sound</button>
</div>
</div>
<audio class="sound" autoplay></audio>
</div>`;

const BADGE: Partial<Record<View, string>> = { connecting: 'Connecting', queued: 'Waiting', listening: 'Listening', thinking: 'Thinking', speaking: 'Speaking' };

const STATUS: Record<View, string> = {
  idle: '',
  microphone: 'Allow microphone access to talk with the agent.',
  connecting: 'Connecting…',
  queued: 'All lines are busy. You are in the queue and will be connected when a line is free.',
  listening: 'Listening. Go ahead and speak.',
  thinking: 'Thinking…',
  speaking: 'Speaking…',
  ended: 'The conversation has ended.',
  error: 'Something went wrong.',
};

export class WidgetView {
  readonly card: HTMLElement;
  readonly preview: HTMLImageElement;
  /** The preview when it is a video (an agent's idle video as its preview_url), muted and looping. */
  readonly previewVideo: HTMLVideoElement;
  readonly video: HTMLVideoElement;
  readonly audio: HTMLAudioElement;
  readonly title: HTMLElement;
  readonly status: HTMLElement;
  readonly badgeText: HTMLElement;
  readonly startButton: HTMLButtonElement;
  readonly muteButton: HTMLButtonElement;
  readonly hangupButton: HTMLButtonElement;
  /** Shown when the browser refused to start the bot's sound without a gesture. */
  readonly soundButton: HTMLButtonElement;
  private current: View = 'idle';
  private soundBlocked = false;

  constructor(private readonly root: ShadowRoot) {
    const style = document.createElement('style');
    style.textContent = STYLE;
    const template = document.createElement('template');
    template.innerHTML = MARKUP;
    root.append(style, template.content.cloneNode(true));
    const q = <T extends Element>(selector: string) => root.querySelector(selector) as T;
    this.card = q('.card');
    this.preview = q('.preview');
    this.previewVideo = q('.preview-video');
    this.video = q('video.avatar');
    this.audio = q('audio');
    this.title = q('.title');
    this.status = q('.status');
    this.badgeText = q('.badge-text');
    this.startButton = q('.start');
    this.muteButton = q('.mute');
    this.hangupButton = q('.hangup');
    this.soundButton = q('.sound-on');
    // A preview that does not decode as an image may be a video: tried as one before giving up.
    this.preview.addEventListener('error', () => {
      this.preview.classList.add('none');
      const src = this.preview.getAttribute('src');
      if (src && this.previewVideo.getAttribute('src') !== src) {
        this.previewVideo.src = src;
        this.previewVideo.classList.add('shown');
        void this.previewVideo.play().catch(() => undefined);
      }
    });
    this.previewVideo.addEventListener('error', () => this.previewVideo.classList.remove('shown'));
  }

  get view(): View {
    return this.current;
  }

  setAgent(title: string, previewUrl: string | null): void {
    this.title.textContent = title;
    if (this.previewVideo.getAttribute('src') !== previewUrl) {
      this.previewVideo.classList.remove('shown');
      this.previewVideo.removeAttribute('src');
    }
    if (previewUrl) {
      // Already found to be a video: the image stays hidden.
      if (!this.previewVideo.classList.contains('shown')) this.preview.classList.remove('none');
      if (this.preview.getAttribute('src') !== previewUrl) this.preview.src = previewUrl;
      this.preview.alt = title ? `${title}` : 'Agent preview';
    } else {
      this.preview.classList.add('none');
      this.preview.removeAttribute('src');
      this.preview.alt = '';
    }
  }

  /** Shows a view; `message` replaces the default status text (errors in plain words). */
  show(view: View, message?: string): void {
    const focused = this.root.activeElement;
    this.current = view;
    this.card.dataset.view = view;
    this.status.textContent = message ?? STATUS[view];
    this.badgeText.textContent = BADGE[view] ?? '';
    const live = view === 'listening' || view === 'thinking' || view === 'speaking';
    const pending = view === 'microphone' || view === 'connecting' || view === 'queued';
    this.startButton.hidden = live || pending;
    this.startButton.textContent = view === 'error' ? 'Try again' : view === 'ended' ? 'Start again' : 'Start conversation';
    this.muteButton.hidden = !live;
    this.hangupButton.hidden = !(live || pending);
    this.hangupButton.textContent = live ? 'Hang up' : 'Cancel';
    this.soundButton.hidden = !(this.soundBlocked && (live || pending));
    if (!live && !pending) this.setVideoShown(false);
    // Keep keyboard focus inside the widget when the focused button disappears.
    if (focused instanceof HTMLButtonElement && focused.hidden) {
      const next = [this.hangupButton, this.startButton, this.muteButton].find((b) => !b.hidden);
      next?.focus();
    }
  }

  setVideoShown(shown: boolean): void {
    this.card.dataset.video = shown ? 'on' : 'off';
    // A preview video hidden behind the avatar is not decoded meanwhile.
    if (this.previewVideo.classList.contains('shown')) {
      if (shown) this.previewVideo.pause();
      else void this.previewVideo.play().catch(() => undefined);
    }
  }

  setSoundBlocked(blocked: boolean): void {
    this.soundBlocked = blocked;
    this.show(this.current, this.status.textContent ?? undefined);
  }

  setMuted(muted: boolean): void {
    this.muteButton.setAttribute('aria-pressed', String(muted));
    this.muteButton.textContent = muted ? 'Unmute' : 'Mute';
  }
}
