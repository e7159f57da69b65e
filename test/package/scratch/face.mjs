// The face engine from the installed package: the default face, rendered on a render worker
// thread (the worker entry and the face assets must ship beside the compiled code).
import { HumanFaceModel, shutdownFaceRenderPools } from 'svc-avatar/plugins/face';

const model = new HumanFaceModel('human-portrait', { renderThreads: 1 });
const source = await model.openSource({ configuration: { width: 320, height: 180 } });
const frame = await source.nextFrame();
console.log(JSON.stringify({ threaded: source.raster.threaded, format: frame.image.format, width: frame.image.width, height: frame.image.height, bytes: frame.image.data.length }));
source.close();
await shutdownFaceRenderPools();
